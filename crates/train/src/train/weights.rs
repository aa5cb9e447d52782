//! The frozen weights of a decoder as the fused training step reads them: per block the
//! concatenated Q/K/V and gate/up projections, in the step's compute dtype (bf16 on CUDA, f32
//! on the CPU), so that a block makes 4 matmuls; no weight gradient is ever computed.

use super::ops::FrozenLinear;
use crate::error::Result;
use crate::model::block::{Block, Mlp};
use crate::model::linear::Linear;
use crate::model::config::MlpKind;
use crate::model::decoder::Decoder;
use candle_core::{DType, Device};

/// The frozen weights of one block as the fused training step reads them.
#[derive(Debug, Clone)]
pub struct TrainBlock {
    /// [Q; K; V]
    pub qkv: FrozenLinear,
    pub o: FrozenLinear,
    /// SwiGLU / GeGLU: [gate; up]; GELU: fc.
    pub mlp_in: FrozenLinear,
    pub down: FrozenLinear,
}

/// The frozen weights of a decoder for the fused training step, in its compute dtype (bf16 on
/// CUDA, f32 on the CPU): concatenated projections, so that a block makes 4 matmuls.
#[derive(Debug, Clone)]
pub struct TrainWeights {
    pub dtype: DType,
    pub blocks: Vec<TrainBlock>,
    pub lm_head: FrozenLinear,
}

impl TrainWeights {
    /// The compute dtype of the training step on `dev` unless asked otherwise: bf16 on CUDA
    /// (f32 accumulation), f32 on the CPU.
    pub fn default_dtype(dev: &Device) -> DType {
        if dev.is_cuda() {
            DType::BF16
        } else {
            DType::F32
        }
    }

    pub fn new(d: &Decoder, dtype: DType) -> Result<TrainWeights> {
        let blocks = d.blocks.iter().map(|b| TrainBlock::new(b, dtype)).collect::<Result<Vec<_>>>()?;
        let lm_head = FrozenLinear::cat(&[&Linear { w: d.lm_head.clone(), b: None }], dtype)?;
        Ok(TrainWeights { dtype, blocks, lm_head })
    }
}

impl TrainBlock {
    fn new(b: &Block, dtype: DType) -> Result<TrainBlock> {
        let Mlp { kind, up_or_fc, gate, down } = &b.mlp;
        let mlp_in = match (kind, gate) {
            (MlpKind::SwiGlu | MlpKind::GeGlu, Some(g)) => FrozenLinear::cat(&[g, up_or_fc], dtype)?,
            _ => FrozenLinear::cat(&[up_or_fc], dtype)?,
        };
        Ok(TrainBlock {
            qkv: FrozenLinear::cat(&[&b.q, &b.k, &b.v], dtype)?,
            o: FrozenLinear::cat(&[&b.o], dtype)?,
            mlp_in,
            down: FrozenLinear::cat(&[down], dtype)?,
        })
    }
}
