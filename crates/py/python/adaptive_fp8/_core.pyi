"""Type stubs of the native core (crates/py/src/lib.rs)."""

import os
from typing import Optional, Union

__version__: str

class PolicyError(ValueError): ...
class ConfigError(ValueError): ...
class PlanError(ValueError): ...
class MissingRulesError(PlanError): ...

class Decision:
    fp8: bool
    reason: str
    key: Optional[dict[str, Union[str, int]]]
    min_tokens: Optional[int]
    measured_speedup: Optional[float]
    estimated: bool
    kind: str
    num_tokens: int
    recipe: Optional[str]
    def __bool__(self) -> bool: ...

class Policy:
    @staticmethod
    def load(path: Union[str, os.PathLike[str]]) -> Policy: ...
    @staticmethod
    def from_json(text: str, origin: str = "<string>") -> Policy: ...
    def decide(
        self,
        te_class: Optional[str] = None,
        *,
        kind: Optional[str] = None,
        ub_name: Optional[str] = None,
        tp: int = 1,
        etp: Optional[int] = None,
        num_gemms: Optional[int] = None,
        topk: Optional[int] = None,
        seq_length: Optional[int] = None,
        micro_batch_size: int = 1,
        cp: int = 1,
        num_tokens: Optional[int] = None,
        expert: bool = False,
        execution: str = "eager",
    ) -> Decision: ...
    @property
    def estimated(self) -> bool: ...
    @property
    def speedup_threshold(self) -> float: ...
    @property
    def models(self) -> list[str]: ...
    @property
    def recipes(self) -> list[str]: ...
    def recipe_warning(self, recipe: str) -> Optional[str]: ...
    def device_warning(self, device: str) -> Optional[str]: ...
    @property
    def origin(self) -> str: ...
    def to_json(self) -> str: ...
    def __len__(self) -> int: ...

def plan_json(
    model: Union[str, os.PathLike[str], dict],
    policy: Union[Policy, str, os.PathLike[str], None] = None,
    *,
    vit_policy: Union[Policy, str, os.PathLike[str], None] = None,
    tp: Optional[int] = None,
    ep: Optional[int] = None,
    etp: Optional[int] = None,
    cp: Optional[int] = None,
    seq_length: Optional[int] = None,
    micro_batch_size: Optional[int] = None,
    num_tokens: Optional[int] = None,
    vit_num_tokens: Optional[int] = None,
    topk: Optional[int] = None,
    no_sequence_parallel: bool = False,
    root: Union[str, os.PathLike[str], None] = None,
    config_root: Union[str, os.PathLike[str], None] = None,
    execution: Optional[str] = None,
    allow_missing: bool = False,
) -> str: ...

def te_precision_config_json(
    model: Union[str, os.PathLike[str], dict],
    policy: Union[Policy, str, os.PathLike[str], None] = None,
    *,
    recipe: str = "blockwise",
    fp8_format: str = "e4m3",
    tp: Optional[int] = None,
    ep: Optional[int] = None,
    etp: Optional[int] = None,
    cp: Optional[int] = None,
    seq_length: Optional[int] = None,
    micro_batch_size: Optional[int] = None,
    num_tokens: Optional[int] = None,
    topk: Optional[int] = None,
    no_sequence_parallel: bool = False,
    root: Union[str, os.PathLike[str], None] = None,
    config_root: Union[str, os.PathLike[str], None] = None,
    execution: Optional[str] = None,
    allow_missing: bool = False,
) -> str: ...
