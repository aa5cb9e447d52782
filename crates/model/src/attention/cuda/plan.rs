//! Host side of the CUDA Focus kernels (`attention::cuda::host`): the tokens of each group in position
//! order ("segments"), where each token's partial result goes, and the order of query tiles.
//! Kept free of CUDA so that CI checks it on the CPU.

use crate::error::{Error, Result};
use crate::focus::mask;

/// Segment g lists the tokens of group g in position order; the segments are concatenated.
#[derive(Debug, Clone)]
pub struct GroupSegments {
    pub t: usize,
    /// Groups per token (the same for every token: hard top-k).
    pub k: usize,
    pub groups: usize,
    /// Position of each concatenated row.
    pub idx: Vec<i32>,
    /// Partial-output slot of each row: position * k + rank of the group among the token's.
    pub slot: Vec<i32>,
    pub seg_off: Vec<i32>,
    pub seg_len: Vec<i32>,
}

/// Segments from this many rows on are processed group by group (see `tiles`).
const GROUP_MAJOR_ROWS: usize = 32 * 1024;

impl GroupSegments {
    /// Every mask must have the same number k >= 1 of groups, all below 32.
    pub fn new(masks: &[u64]) -> Result<Self> {
        let t = masks.len();
        if t == 0 || t > i32::MAX as usize / 64 {
            return Err(Error::Invalid(format!("sequence length {t} out of range for the CUDA kernels")));
        }
        let k = masks[0].count_ones() as usize;
        if k == 0 || masks.iter().any(|m| m.count_ones() as usize != k) {
            return Err(Error::Invalid("CUDA Focus attention needs the same number (>= 1) of groups for every token".into()));
        }
        let groups = masks.iter().map(|m| 64 - m.leading_zeros() as usize).max().unwrap_or(0);
        if groups > 32 {
            return Err(Error::Invalid(format!("the CUDA kernels take at most 32 groups, not {groups}")));
        }
        // Counting sort by group, stable in position.
        let mut seg_len = vec![0i32; groups];
        for &m in masks {
            mask::groups(m).for_each(|g| seg_len[g] += 1);
        }
        let mut seg_off = vec![0i32; groups];
        for g in 1..groups {
            seg_off[g] = seg_off[g - 1] + seg_len[g - 1];
        }
        let (mut idx, mut slot) = (vec![0i32; t * k], vec![0i32; t * k]);
        let mut fill = seg_off.clone();
        for (i, &m) in masks.iter().enumerate() {
            for (rank, g) in mask::groups(m).enumerate() {
                let r = fill[g] as usize;
                idx[r] = i as i32;
                slot[r] = (i * k + rank) as i32;
                fill[g] += 1;
            }
        }
        Ok(GroupSegments { t, k, groups, idx, slot, seg_off, seg_len })
    }

    /// Query tiles (segment, first row) of `rows` rows. The most work (latest rows) comes first,
    /// so that the grid's tail is short. Long segments go group by group instead, so that the
    /// blocks resident at one time read one segment's keys, which then stay in L2 (H200, 1M
    /// tokens, K=8, k=1: 595 -> 576 ms; at 16K the tail costs more than L2 saves: 0.50 -> 0.72 ms).
    pub fn tiles(&self, rows: usize) -> Vec<(i32, i32)> {
        let mut list: Vec<(i32, i32)> = (0..self.groups)
            .flat_map(|g| (0..self.seg_len[g] as usize).step_by(rows.max(1)).map(move |r| (g as i32, r as i32)))
            .collect();
        if self.t * self.k / self.groups.max(1) >= GROUP_MAJOR_ROWS {
            list.sort_by_key(|&(g, r)| (g, std::cmp::Reverse(r)));
        } else {
            list.sort_by_key(|&(_, r)| std::cmp::Reverse(r));
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::focus::mask::balanced_masks;

    fn check(masks: &[u64], rows: usize) {
        let s = GroupSegments::new(masks).unwrap();
        let (t, k) = (masks.len(), s.k);
        assert_eq!(s.idx.len(), t * k);
        // Each segment: exactly the tokens of its group, strictly increasing.
        for g in 0..s.groups {
            let (o, n) = (s.seg_off[g] as usize, s.seg_len[g] as usize);
            let seg = &s.idx[o..o + n];
            let want: Vec<i32> = (0..t).filter(|&i| masks[i] >> g & 1 == 1).map(|i| i as i32).collect();
            assert_eq!(seg, &want[..], "group {g}");
        }
        // Slots: a permutation of 0..t*k, and slot / k is the row's position.
        let mut seen = vec![false; t * k];
        for (r, &sl) in s.slot.iter().enumerate() {
            assert_eq!(sl as usize / k, s.idx[r] as usize);
            assert!(!std::mem::replace(&mut seen[sl as usize], true), "slot {sl} twice");
        }
        // Tiles cover every row of every segment exactly once.
        let mut covered = vec![0u8; t * k];
        for (g, r0) in s.tiles(rows) {
            let (o, n) = (s.seg_off[g as usize] as usize, s.seg_len[g as usize] as usize);
            assert_eq!(r0 as usize % rows, 0);
            for r in r0 as usize..(r0 as usize + rows).min(n) {
                covered[o + r] += 1;
            }
        }
        assert!(covered.iter().all(|&c| c == 1));
    }

    #[test]
    fn segments_slots_and_tiles_cover_every_token_once() {
        check(&balanced_masks(1000, 8, 1, 1).unwrap(), 64);
        check(&balanced_masks(777, 4, 2, 2).unwrap(), 128);
        check(&balanced_masks(300, 8, 3, 3).unwrap(), 64);
        check(&[1], 64);
        // Long segments: group-major order, latest rows first within a group.
        let masks = balanced_masks(70_000, 2, 1, 4).unwrap();
        check(&masks, 128);
        let tiles = GroupSegments::new(&masks).unwrap().tiles(128);
        assert!(tiles.windows(2).all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 > w[1].1)));
        // Short ones: latest rows first across groups.
        let tiles = GroupSegments::new(&balanced_masks(5000, 8, 1, 5).unwrap()).unwrap().tiles(64);
        assert!(tiles.windows(2).all(|w| w[0].1 >= w[1].1));
    }

    #[test]
    fn uneven_k_too_many_groups_and_empty_input_are_rejected() {
        assert!(GroupSegments::new(&[1, 3, 1]).is_err());
        assert!(GroupSegments::new(&[]).is_err());
        assert!(GroupSegments::new(&[0, 0]).is_err());
        assert!(GroupSegments::new(&[1 << 40]).is_err());
        assert!(GroupSegments::new(&[1 << 31]).is_ok());
    }
}
