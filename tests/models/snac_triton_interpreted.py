"""Runs in a subprocess of tests/models/test_snac_triton.py, with TRITON_INTERPRET=1 and
Triton on its path (`make reference-deps` puts it in .ref/triton-interpreter): SNAC's
stateful decoder with its residual units, Snakes and upsamplings with their noise as Triton
kernels (interpreted on the CPU) against the same decoder's torch ops, over a stream's calls. Prints one JSON line a
call."""

from __future__ import annotations

import json

import torch
from snac import SNAC

from models.codecs.snac_checkpoint import fold_weight_norm, tiny_snac_config
from models.codecs.snac_noise import install_positional_noise
from models.codecs.snac_streaming import (
    NO_END,
    StreamingSnacDecoder,
    _passing,
    transposed_product,
    upsample,
)


def main() -> None:
    torch.manual_seed(0)
    model = SNAC(**tiny_snac_config()).eval()
    install_positional_noise(model)
    fold_weight_norm(model)
    with torch.no_grad():  # SNAC starts its alphas at 1 and its biases at 0: make them count
        for name, param in model.decoder.named_parameters():
            if name.endswith("alpha"):
                param.uniform_(0.5, 2.0)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
    torch_ops = StreamingSnacDecoder(model)
    kernels = StreamingSnacDecoder(model)
    kernels.use_triton_kernels()
    print(
        json.dumps(
            {
                "compiled_blocks": len(kernels.repeated_blocks()),
                "compiled_blocks_torch": len(torch_ops.repeated_blocks()),
                "joined_convs": sum(run is _passing for run in kernels._runs),
            }
        )
    )
    batch = 2
    states = [d.new_state(batch) for d in (torch_ops, kernels)]
    position = torch.tensor([0, 37])
    end = torch.tensor([NO_END, 40])  # the second stream ends inside the second call
    seed = torch.tensor([3, 11])
    # 1 latent step: the first block's units see 8 samples, fewer than their reach (h = 27);
    # 4 steps: 32, more than it, and the last two blocks' lines (1024 and 2048 samples with
    # their kept inputs) span two and three join programs. The last call flushes the second
    # stream (at 1 step as at 2, the same units see its end inside their lines): its
    # first block's units' inputs reach past its end. Interpreted kernels cost seconds a
    # step, so no other call takes more than 1.
    for steps in (1, 4, 1, 1):
        latent = torch.randn(batch, model.latent_dim, steps)
        with torch.inference_mode():
            (want, states[0]), (got, states[1]) = (
                d.decode(latent, s, position, end, seed)
                for d, s in zip((torch_ops, kernels), states, strict=True)
            )
        print(
            json.dumps(
                {
                    "steps": steps,
                    "samples": got.shape[-1],
                    "rms": want.pow(2).mean().sqrt().item(),
                    "max_err": (got - want).abs().max().item(),
                    "state_max_err": (states[1] - states[0]).abs().max().item(),
                    "state_rms": states[0].pow(2).mean().sqrt().item(),
                }
            )
        )
        position = position + steps
    print(json.dumps({"tiles": tile_errors(torch_ops)}))


def tile_errors(decoder: StreamingSnacDecoder) -> list[float]:
    """Each of the tiles the GPU tunes its kernels over, on one residual unit (dilation 9: a
    reach of 27, so a call of 40 samples reads its kept inputs too, and one of 130 spans
    three tiles of 64 samples and five of 32, the last part-filled) and on the widest
    upsampling step with its noise (a call of 3 and one of 17 input steps: 136 samples, also
    three and five tiles): the largest difference from the torch ops over both calls' outputs
    and states. Interpreted kernels cost by their programs, so the long calls are no longer
    than spanning tiles needs."""
    from models.codecs import snac_triton

    unit = next(u for u in decoder.residual_steps.values() if u.conv.dilation[0] == 9)
    c, h = unit.conv.in_channels, unit.reach
    layers = unit.snake_in, unit.conv, unit.snake_out, unit.pointwise
    conv, (_, noise) = next(iter(decoder.noised_upsamples.items()))
    noise_step = decoder.noise_steps[noise]
    errors = []
    for config in snac_triton.TAPS_MIX_CONFIGS:
        tile = {**config.kwargs, "num_warps": config.num_warps}
        snac_triton._tiled = lambda kernel, tile=tile: (kernel, tile)
        worst = 0.0
        skip, kept = torch.randn(2, c, h), torch.randn(2, c, 2 * h)
        for n, start in ((40, 5), (130, 45)):
            x = torch.randn(2, c, n)
            begin, end = torch.tensor([start, start]), torch.tensor([NO_END, start + n - 7])
            with torch.inference_mode():
                want = unit(x, skip, kept, begin, end)
                got = snac_triton.residual_unit(x, skip, kept, begin, end, *layers)
            worst = max(
                worst, *((g - w).abs().max().item() for g, w in zip(got, want, strict=True))
            )
        seed = torch.tensor([3, 11])
        for n, start in ((3, -2), (17, 17)):
            joined = torch.randn(2, conv.in_channels, n + 1)
            begin = torch.tensor([start, start + 5])
            with torch.inference_mode():
                want = noise_step(upsample(joined, conv), seed, begin)
                z = transposed_product(joined, conv)
                weight = noise.linear.weight[:, :, 0]
                got = snac_triton.upsample_noise(z, conv.bias, weight, noise.salt, seed, begin)
            worst = max(worst, (got - want).abs().max().item())
        errors.append(worst)
    return errors


if __name__ == "__main__":
    main()
