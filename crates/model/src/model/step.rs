//! A generation step's token and position as device data, for a step on a GPU. Everything in
//! a decode step that depends on the position (the token's embedding, its RoPE rows, GPT-2's
//! position embedding, the cache row it writes, the keys it attends) reads it from one small
//! device buffer that the host writes before the step, never from a kernel argument or an
//! upload made inside the step. So the step's work is the same at every position, and a step
//! captured once as a CUDA graph (`generate::graph`) replays for every later token.

use super::block::RopeTables;
use super::config::ModelConfig;
use crate::error::Result;
use candle_core::{DType, Device, Tensor};

pub struct DeviceStep {
    /// [token id, position] (u32).
    buf: Tensor,
    /// Per RoPE key (base and scaling): the cos/sin tables of every position of the context ((context,
    /// head_dim / 2), `block::rope_tables`), built once; a step takes its row by index. The
    /// rows are bitwise those `rope_tables_from(position, 1)` gives (the same f32 angle and the
    /// same cos/sin kernels). Memory: 2 x context x head_dim / 2 x 4 bytes per base (Gemma 3's
    /// two bases at 32K context and head_dim 256: 64 MiB).
    ropes: Vec<RopeTables>,
}

impl DeviceStep {
    pub fn new(cfg: &ModelConfig, dev: &Device) -> Result<Self> {
        let mut ropes: Vec<RopeTables> = Vec::new();
        for l in 0..cfg.n_layers {
            let la = cfg.layer_attention(l);
            if let Some(key) = la.rope_key() {
                if !ropes.iter().any(|r| r.0 == key) {
                    let (cos, sin) = super::block::rope_tables_scaled(0, cfg.context, cfg.head_dim, key.0, cfg.rope_scaling_of(&la), dev)?;
                    ropes.push((key, cos, sin));
                }
            }
        }
        Ok(DeviceStep { buf: Tensor::zeros(2, DType::U32, dev)?, ropes })
    }

    /// Sets the next step's token and position (a copy to the device, in stream order: the
    /// previous step has read the old values).
    pub fn write(&self, id: u32, pos: usize) -> Result<()> {
        let pos = u32::try_from(pos).map_err(|_| crate::Error::Invalid(format!("position {pos} does not fit a u32")))?;
        self.buf.slice_set(&Tensor::new(&[id, pos], self.buf.device())?, 0, 0)?;
        Ok(())
    }

    /// The whole buffer ([id, position]), as the kernels take it.
    pub fn buf(&self) -> &Tensor {
        &self.buf
    }

    /// The token id (1,), an index for `index_select`.
    pub fn id(&self) -> Result<Tensor> {
        Ok(self.buf.narrow(0, 0, 1)?)
    }

    /// The position (1,), an index for `index_select`.
    pub fn pos(&self) -> Result<Tensor> {
        Ok(self.buf.narrow(0, 1, 1)?)
    }

    /// The step's RoPE rows (1, head_dim / 2) for each key.
    pub fn rope_rows(&self) -> Result<Vec<RopeTables>> {
        let pos = self.pos()?;
        self.ropes.iter().map(|(key, c, s)| Ok((*key, c.index_select(&pos, 0)?, s.index_select(&pos, 0)?))).collect()
    }
}
