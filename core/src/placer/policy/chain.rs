//! The shortlist's joint availability chain: each shortlisted spot pool has
//! four availability states ([`AvailState`]) and pools are independent, so a
//! shortlist of k pools has 4^k joint states, numbered in base 4 (pool `k`
//! is digit `k`). This file holds the numbering, the sparse transition
//! matrices the solver reads and the expectation kernel of its inner loop;
//! [`super::mdp`] holds the decision process that uses them.

use super::AvailState;

/// A sparse transition matrix: the non-zero (next state, probability) pairs of
/// each state, rows laid end to end.
#[derive(Debug, Clone)]
pub(super) struct Sparse {
    start: Vec<usize>,
    entries: Vec<(usize, f64)>,
}

impl Sparse {
    pub(super) fn from_dense(m: &[f64], n: usize) -> Self {
        let mut start = Vec::with_capacity(n + 1);
        let mut entries = Vec::new();
        for a in 0..n {
            start.push(entries.len());
            entries.extend(
                (0..n)
                    .filter(|b| m[a * n + b] > 0.0)
                    .map(|b| (b, m[a * n + b])),
            );
        }
        start.push(entries.len());
        Sparse { start, entries }
    }

    pub(super) fn row(&self, a: usize) -> &[(usize, f64)] {
        &self.entries[self.start[a]..self.start[a + 1]]
    }
}

/// Pool `k`'s availability digit in joint state `a`.
pub(crate) fn digit(a: usize, k: usize) -> usize {
    a / 4usize.pow(k as u32) % 4
}

/// The joint state of several pools' availability.
pub(crate) fn joint(states: &[AvailState]) -> usize {
    states
        .iter()
        .enumerate()
        .map(|(k, s)| s.digit() * 4usize.pow(k as u32))
        .sum()
}

/// Whether spot pool `k` is available in joint state `a`: bit `k` of
/// `UP[a]` for up to [`super::MAX_SHORTLIST`] pools (no division in the
/// solver's inner loop).
pub(super) fn up(a: usize, k: usize) -> bool {
    UP[a] >> k & 1 == 1
}

const UP: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut a = 0;
    while a < 64 {
        let mut k = 0;
        while k < 3 {
            if (a >> (2 * k)) & 3 < 2 {
                t[a] |= 1 << k;
            }
            k += 1;
        }
        a += 1;
    }
    t
};

/// `out[m][a] = Σ_b next[a][b]·src[m][b]` for every mode `m` of a block of
/// `states`-wide rows, each sum in [`Sparse`] order (as [`super::mdp::Mdp::ex`] adds).
pub(super) fn expect_block(next: &Sparse, states: usize, src: &[f64], out: &mut [f64]) {
    // A shortlist of k pools has 4^k joint states and 2 + k modes.
    match states {
        1 => expect_rows::<1, 2>(next, src, out),
        4 => expect_rows::<4, 3>(next, src, out),
        16 => expect_rows::<16, 4>(next, src, out),
        _ => expect_rows::<64, 5>(next, src, out),
    }
}

fn expect_rows<const S: usize, const M: usize>(next: &Sparse, src: &[f64], out: &mut [f64]) {
    let (src, _) = src.as_chunks::<S>();
    let (out, _) = out.as_chunks_mut::<S>();
    let (src, out) = (&src[..M], &mut out[..M]);
    for a in 0..S {
        let mut acc = [0.0; M];
        for &(b, pr) in next.row(a) {
            // `S` is a power of two and `b < S`: the mask only spares the
            // bounds check.
            let b = b & (S - 1);
            for (x, s) in acc.iter_mut().zip(src) {
                *x += pr * s[b];
            }
        }
        for (o, x) in out.iter_mut().zip(acc) {
            o[a] = x;
        }
    }
}

/// The n×n identity, row-major.
pub(super) fn identity(n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect()
}

/// The product of two n×n row-major matrices.
pub(super) fn matmul(x: &[f64], y: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            out[i * n + j] = (0..n).map(|l| x[i * n + l] * y[l * n + j]).sum();
        }
    }
    out
}
