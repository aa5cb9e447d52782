//! Groups that line up: a centroid's index means nothing across layers (or adapters), so the
//! same colour in two columns would say nothing. Each layer's groups are matched to the previous
//! layer's (already matched) groups by token overlap: the K x K co-membership counts (tokens
//! that have group a among their top-k groups in one layer and group b in the other), assigned
//! one to one by the Hungarian method so that the total overlap is as large as possible. Layer 0
//! keeps its raw indices; a second run (another adapter, another mode) is matched layer by layer
//! to a reference run the same way. The views colour and name groups by the matched index unless
//! the user asks for raw indices.

/// A minimum-cost perfect matching of a square cost matrix (the Hungarian method with
/// potentials, O(n^3)): `result[row] = column`.
pub fn hungarian(cost: &[Vec<i64>]) -> Vec<usize> {
    let n = cost.len();
    if n == 0 {
        return Vec::new();
    }
    let inf = i64::MAX / 4;
    // 1-based arrays, as in the classic formulation; p[j] = row matched to column j.
    let (mut u, mut v) = (vec![0i64; n + 1], vec![0i64; n + 1]);
    let (mut p, mut way) = (vec![0usize; n + 1], vec![0usize; n + 1]);
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0usize;
        let mut minv = vec![inf; n + 1];
        let mut used = vec![false; n + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = inf;
            let mut j1 = 0usize;
            for j in 1..=n {
                if !used[j] {
                    let cur = cost[i0 - 1][j - 1] - u[i0] - v[j];
                    if cur < minv[j] {
                        minv[j] = cur;
                        way[j] = j0;
                    }
                    if minv[j] < delta {
                        delta = minv[j];
                        j1 = j;
                    }
                }
            }
            for j in 0..=n {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut out = vec![0usize; n];
    for j in 1..=n {
        if p[j] > 0 {
            out[p[j] - 1] = j - 1;
        }
    }
    out
}

/// Co-membership counts: `c[a][b]` = tokens with display group `a` (through `ref_map`) among
/// their top-k groups in the reference and raw group `b` in the other; `n` = max(K_ref, K).
fn counts(ref_masks: &[u64], ref_map: &[usize], masks: &[u64], n: usize) -> Vec<Vec<i64>> {
    let mut c = vec![vec![0i64; n]; n];
    for (&mr, &m) in ref_masks.iter().zip(masks) {
        for a in crate::focus::mask::groups(mr) {
            let a = ref_map.get(a).copied().unwrap_or(a);
            for b in crate::focus::mask::groups(m) {
                if a < n && b < n {
                    c[a][b] += 1;
                }
            }
        }
    }
    c
}

/// The display index of each raw group of a layer (`masks`: its tokens' top-k bitmasks) that
/// best overlaps the reference layer's display groups. Indices are a permutation of
/// 0..max(K_ref, K) restricted to the layer's K groups.
pub fn match_layer(ref_masks: &[u64], ref_map: &[usize], masks: &[u64], groups: usize) -> Vec<usize> {
    let n = groups.max(ref_map.len());
    let c = counts(ref_masks, ref_map, masks, n);
    // Rows: this layer's raw groups; columns: display indices. Maximise overlap.
    let cost: Vec<Vec<i64>> = (0..n).map(|b| (0..n).map(|a| -c[a][b]).collect()).collect();
    let m = hungarian(&cost);
    m[..groups].to_vec()
}

/// Display indices for every layer of one run: layer 0 as it is, each further layer matched to
/// the one before it.
pub fn chain(masks: &[Vec<u64>], groups: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::with_capacity(masks.len());
    for (l, m) in masks.iter().enumerate() {
        let map = match l {
            0 => (0..groups).collect(),
            _ => match_layer(&masks[l - 1], &out[l - 1], m, groups),
        };
        out.push(map);
    }
    out
}

/// Display indices for every layer of a second run, matched layer by layer to a reference
/// run's display groups (the same tokens: a second adapter or mode on the same text).
pub fn to_reference(ref_masks: &[Vec<u64>], ref_maps: &[Vec<usize>], masks: &[Vec<u64>], groups: usize) -> Vec<Vec<usize>> {
    masks
        .iter()
        .enumerate()
        .map(|(l, m)| match (ref_masks.get(l), ref_maps.get(l)) {
            (Some(rm), Some(rmap)) if rm.len() == m.len() => match_layer(rm, rmap, m, groups),
            _ => (0..groups).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hungarian_finds_the_cheapest_assignment() {
        let cost = vec![vec![4, 1, 3], vec![2, 0, 5], vec![3, 2, 2]];
        let m = hungarian(&cost);
        let total: i64 = m.iter().enumerate().map(|(r, &c)| cost[r][c]).sum();
        assert_eq!(total, 5);
        let mut seen = m.clone();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    /// A layer whose groups are the previous layer's under another numbering gets the previous
    /// layer's numbers back; a raw-index layer 0 stays as it is.
    #[test]
    fn permuted_layers_line_up() {
        let argmax0 = [0usize, 1, 2, 3, 0, 1, 2, 3, 3, 3];
        let perm = [2usize, 0, 3, 1]; // layer 1's raw index of layer 0's group g
        let l0: Vec<u64> = argmax0.iter().map(|&g| 1 << g).collect();
        let l1: Vec<u64> = argmax0.iter().map(|&g| 1 << perm[g]).collect();
        let maps = chain(&[l0.clone(), l1.clone()], 4);
        assert_eq!(maps[0], vec![0, 1, 2, 3]);
        for g in 0..4 {
            assert_eq!(maps[1][perm[g]], g, "layer 1's group {} shows as layer 0's {g}", perm[g]);
        }
        // Another run with K = 8 against this reference: its 4 used groups line up, the rest
        // take the free indices.
        let other: Vec<u64> = argmax0.iter().map(|&g| 1 << (g + 4)).collect();
        let m = to_reference(&[l0], &[maps[0].clone()], &[other], 8);
        for g in 0..4 {
            assert_eq!(m[0][g + 4], g);
        }
        let mut all = m[0].clone();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
    }
}
