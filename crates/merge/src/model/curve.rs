//! The numerical pieces of the step model: medians and noise bands of rounds, a module's time
//! against the token count, and small least-squares polynomials. Pure arithmetic.

/// The median (the mean of the middle two for an even count); 0 for none.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Nearest-rank quantile (what the rest of the toolkit reports as p10/p90).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// Half the p10-p90 band of paired differences `a[r] - b[r]`: the noise of a measured delta.
pub fn half_band(a: &[f64], b: &[f64]) -> f64 {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    (quantile(&d, 0.9) - quantile(&d, 0.1)) / 2.0
}

/// A value measured at ascending counts, read at any count: linear between measured counts,
/// linear through the last two beyond the largest (GEMM time grows linearly with the rows once
/// the GPU is full), and the first value below the smallest. Never below a small positive floor.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    points: Vec<(f64, f64)>,
}

impl Curve {
    /// From `(count, value)` pairs, any order; a count given twice keeps the mean.
    pub fn new(mut pts: Vec<(u64, f64)>) -> Curve {
        pts.sort_by_key(|p| p.0);
        let mut points: Vec<(f64, f64, u32)> = Vec::new();
        for (t, v) in pts {
            match points.last_mut() {
                Some(last) if last.0 == t as f64 => {
                    last.1 += v;
                    last.2 += 1;
                }
                _ => points.push((t as f64, v, 1)),
            }
        }
        Curve {
            points: points
                .into_iter()
                .map(|(t, v, n)| (t, v / f64::from(n)))
                .collect(),
        }
    }

    /// The value at `t`.
    pub fn at(&self, t: f64) -> f64 {
        let p = &self.points;
        let v = match p.len() {
            0 => 0.0,
            1 => p[0].1,
            _ if t <= p[0].0 => p[0].1,
            n if t >= p[n - 1].0 => line(p[n - 2], p[n - 1], t),
            _ => {
                let i = p.partition_point(|q| q.0 <= t).max(1);
                line(p[i - 1], p[i], t)
            }
        };
        v.max(FLOOR_MS)
    }

    /// The noise of a difference read at `t` whose noise at each measured count this curve
    /// holds: the value at `t` within the measured counts; beyond the largest, where the
    /// difference is read on the line through the last two, that line's noise, each point's
    /// noise weighted by its leverage (`λ = (t - t_n) / (t_n - t_{n-1})`:
    /// `sqrt(((1 + λ) σ_n)^2 + (λ σ_{n-1})^2)`), so a crossing far above the sweep needs a gain
    /// that grows faster than its noise.
    pub fn spread_at(&self, t: f64) -> f64 {
        let p = &self.points;
        match p.len() {
            n if n >= 2 && t > p[n - 1].0 && p[n - 1].0 > p[n - 2].0 => {
                let ((t1, s1), (t2, s2)) = (p[n - 2], p[n - 1]);
                let l = (t - t2) / (t2 - t1);
                ((1.0 + l) * s2).hypot(l * s1)
            }
            _ => self.at(t),
        }
    }

    /// A share at `t` (one that may be 0, so without the floor): linear in the logarithm of the
    /// count between measured counts, the nearest measured value outside them. A share follows
    /// the balance of a step's host and GPU time, and the GPU time doubles with the count: the
    /// calibrated counts are doublings apart, and a share moves as much per doubling, not per
    /// token.
    pub fn raw_at(&self, t: f64) -> f64 {
        let p = &self.points;
        match p.len() {
            0 => 0.0,
            1 => p[0].1,
            _ if t <= p[0].0 => p[0].1,
            n if t >= p[n - 1].0 => p[n - 1].1,
            _ => {
                let i = p.partition_point(|q| q.0 <= t).max(1);
                if p[i - 1].0 > 0.0 {
                    let ln = |q: (f64, f64)| (q.0.ln(), q.1);
                    line(ln(p[i - 1]), ln(p[i]), t.ln())
                } else {
                    line(p[i - 1], p[i], t)
                }
            }
        }
    }

    /// The measured counts.
    pub fn counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.points.iter().map(|p| p.0 as u64)
    }
}

/// The smallest time a module is read as (1 us): extrapolation never makes work free.
pub const FLOOR_MS: f64 = 1e-3;

fn line(a: (f64, f64), b: (f64, f64), t: f64) -> f64 {
    if b.0 == a.0 {
        return b.1;
    }
    a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0)
}

/// `c[0] + c[1] t + c[2] t^2 ...`, `t` in thousands of tokens (keeps the normal equations well
/// conditioned).
#[derive(Debug, Clone, PartialEq)]
pub struct Poly {
    /// Coefficients, lowest degree first.
    pub coef: Vec<f64>,
}

impl Poly {
    /// The value at `t` tokens.
    pub fn at(&self, t: f64) -> f64 {
        let x = t / 1000.0;
        self.coef.iter().rev().fold(0.0, |acc, c| acc * x + c)
    }

    /// The least-squares polynomial of degree at most `max_degree` (and at most one less than the
    /// number of distinct counts) through `(t, y)`; where a quadratic bends down (a negative
    /// t^2 term: no work in a step shrinks per token as tokens grow), the line instead.
    pub fn fit(pts: &[(u64, f64)], max_degree: usize) -> Poly {
        let mut distinct: Vec<u64> = pts.iter().map(|p| p.0).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if pts.is_empty() {
            return Poly { coef: vec![0.0] };
        }
        let degree = max_degree.min(distinct.len() - 1);
        let p = least_squares(pts, degree);
        if degree == 2 && p.coef[2] < 0.0 {
            return least_squares(pts, 1);
        }
        p
    }
}

fn least_squares(pts: &[(u64, f64)], degree: usize) -> Poly {
    let n = degree + 1;
    let mut a = vec![vec![0.0; n + 1]; n];
    for &(t, y) in pts {
        let x = t as f64 / 1000.0;
        let pows: Vec<f64> = (0..n).map(|k| x.powi(k as i32)).collect();
        for i in 0..n {
            for j in 0..n {
                a[i][j] += pows[i] * pows[j];
            }
            a[i][n] += pows[i] * y;
        }
    }
    // Gaussian elimination with partial pivoting on the normal equations (n <= 3).
    for c in 0..n {
        let piv = (c..n)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap_or(c);
        a.swap(c, piv);
        if a[c][c].abs() < 1e-12 {
            return Poly {
                coef: vec![pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64],
            };
        }
        let pivot = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row.iter_mut().zip(&pivot).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    Poly {
        coef: (0..n).map(|i| a[i][n] / a[i][i]).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_interpolate_and_extend_linearly() {
        let c = Curve::new(vec![(2048, 2.0), (1024, 1.0), (4096, 5.0)]);
        assert_eq!(c.at(1024.0), 1.0);
        assert!((c.at(1536.0) - 1.5).abs() < 1e-12);
        assert!((c.at(8192.0) - 11.0).abs() < 1e-12, "{}", c.at(8192.0));
        assert_eq!(c.at(512.0), 1.0);
        let falling = Curve::new(vec![(1, 1.0), (2, 0.5)]);
        assert_eq!(falling.at(100.0), FLOOR_MS);
    }

    #[test]
    fn shares_move_per_doubling_between_counts_and_hold_outside() {
        let k = Curve::new(vec![(1024, 0.0), (4096, 0.2), (16384, 0.1)]);
        // 2048 is one doubling of two: halfway in the share (linear in tokens: a third).
        assert!(
            (k.raw_at(2048.0) - 0.1).abs() < 1e-12,
            "{}",
            k.raw_at(2048.0)
        );
        assert!(
            (k.raw_at(8192.0) - 0.15).abs() < 1e-12,
            "{}",
            k.raw_at(8192.0)
        );
        // Measured counts exactly, the nearest outside, and no floor (a share may be 0).
        assert_eq!(k.raw_at(4096.0), 0.2);
        assert_eq!(k.raw_at(512.0), 0.0);
        assert_eq!(k.raw_at(65536.0), 0.1);
    }

    #[test]
    fn a_differences_noise_grows_with_its_leverage_beyond_the_sweep() {
        let c = Curve::new(vec![(8192, 0.1), (16384, 0.2)]);
        assert_eq!(c.spread_at(16384.0), 0.2);
        assert!((c.spread_at(12288.0) - 0.15).abs() < 1e-12);
        // Two sweep steps above the last count: the last point's noise 3 times, the one
        // before it 2 times (its leverage), not the noise curve's own line (0.4).
        let far = c.spread_at(32768.0);
        assert!((far - 0.6_f64.hypot(0.2)).abs() < 1e-12, "{far}");
        assert!((c.at(32768.0) - 0.4).abs() < 1e-12);
        // Noise that falls toward the top of the sweep still grows above it.
        let falling = Curve::new(vec![(8192, 0.3), (16384, 0.1)]);
        assert!(falling.spread_at(24576.0) > 0.1 && falling.at(24576.0) == FLOOR_MS);
    }

    #[test]
    fn polynomials_fit_exactly_through_as_many_points_as_terms() {
        let q = |t: f64| 0.5 + 0.25 * (t / 1000.0) + 0.125 * (t / 1000.0).powi(2);
        let pts: Vec<(u64, f64)> = [1024u64, 4096, 16384]
            .iter()
            .map(|&t| (t, q(t as f64)))
            .collect();
        let p = Poly::fit(&pts, 2);
        for t in [1024.0, 8192.0, 32768.0] {
            assert!(
                (p.at(t) - q(t)).abs() < 1e-6 * q(t),
                "{t}: {} vs {}",
                p.at(t),
                q(t)
            );
        }
        // Two points: a line; one: a constant; a downward quadratic: the line.
        assert_eq!(Poly::fit(&pts[..2], 2).coef.len(), 2);
        assert_eq!(Poly::fit(&pts[..1], 2).coef.len(), 1);
        let bent: Vec<(u64, f64)> = vec![(1000, 1.0), (2000, 3.0), (3000, 4.0)];
        assert_eq!(Poly::fit(&bent, 2).coef.len(), 2);
    }

    #[test]
    fn bands_and_medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        assert_eq!(half_band(&[2.0; 5], &[1.0; 5]), 0.0);
        assert!(half_band(&[1.0, 2.0, 3.0, 4.0, 5.0], &[0.0; 5]) > 1.0);
    }
}
