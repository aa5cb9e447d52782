#!/usr/bin/env bash
# On the GPU machine: reassemble what earlier calls copied to /root/stage (model chunks, the
# xz-compressed CUDA binary, the corpus), check the model's sha256. Idempotent.
set -euo pipefail
S=/root/stage; cd $S
M=SmolLM2-135M-Instruct.Q4_1.gguf
[ -f $M ] || cat $M.part?? > $M
sha256sum -c $M.sha256
[ -x focus-lens ] || { xz -d -k focus-lens.xz && chmod +x focus-lens; }
[ -d corpus ] || tar xJf corpus.tar.xz
ls corpus/train | wc -l; ls corpus/heldout | wc -l
