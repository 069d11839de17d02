"""CosyVoice 1's `ConditionalDecoder` (Matcha-TTS's U-Net) as GLM-4-Voice's flow uses it: the
non-causal vector-field estimator. Per level a ResNet block (conv3 + GroupNorm(8) + Mish) and
transformer blocks; down levels halve the frames (stride-2 conv), up levels double them
(transposed conv) and take the skip connection; the last level of each side keeps the length
(a plain conv3). Parameter names follow flow.pt's `decoder.estimator.*`.

Attention "mask": the reference hands diffusers a 0/1 float mask, which scaled-dot-product
attention ADDS to the scores, so padded frames are not masked out (valid pairs just get +1).
The weights were trained that way, so it is reproduced; it is why GLM-4-Voice flow rows are
only batched with rows of the same length (no padding: models/glm_voice/decoder.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.flow_hift.estimator import ResnetBlock1D, TimestepEmbedding, TransformerBlock


class Block1D(nn.Module):
    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        # Indices 0 and 1 as in the checkpoint (2 was the parameterless Mish).
        self.block = nn.ModuleDict(
            {"0": nn.Conv1d(dim, dim_out, 3, padding=1), "1": nn.GroupNorm(8, dim_out)}
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.mish(self.block["1"](self.block["0"](x * mask))) * mask


class Resample(nn.Module):
    """Downsample1D (`conv`: conv3 stride 2) or Upsample1D (`conv`: transposed conv4 stride 2)."""

    def __init__(self, dim: int, up: bool) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(dim, dim, 4, 2, 1) if up else nn.Conv1d(dim, dim, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def _level(dim_in, dim_out, time_dim, heads, head_dim, n_blocks, resample: nn.Module):
    blocks = nn.ModuleList(TransformerBlock(dim_out, heads, head_dim) for _ in range(n_blocks))
    return nn.ModuleList([ResnetBlock1D(dim_in, dim_out, time_dim, Block1D), blocks, resample])


class ConditionalDecoder(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        channels: tuple[int, ...],
        head_dim: int,
        n_blocks: int,
        num_mid_blocks: int,
        heads: int,
    ) -> None:
        super().__init__()
        time_dim = 4 * channels[0]
        self.time_mlp = TimestepEmbedding(in_channels, time_dim)
        args = (time_dim, heads, head_dim, n_blocks)
        self.down_blocks = nn.ModuleList()
        dim_out = in_channels
        for i, ch in enumerate(channels):
            dim_in, dim_out = dim_out, ch
            last = i == len(channels) - 1
            resample = nn.Conv1d(ch, ch, 3, padding=1) if last else Resample(ch, up=False)
            self.down_blocks.append(_level(dim_in, dim_out, *args, resample))
        self.mid_blocks = nn.ModuleList(
            nn.ModuleList(_level(channels[-1], channels[-1], *args, nn.Identity())[:2])
            for _ in range(num_mid_blocks)
        )
        ups = (*channels[::-1], channels[0])
        self.up_blocks = nn.ModuleList()
        for i in range(len(ups) - 1):
            last = i == len(ups) - 2
            ch = ups[i + 1]
            resample = nn.Conv1d(ch, ch, 3, padding=1) if last else Resample(ch, up=True)
            self.up_blocks.append(_level(2 * ups[i], ch, *args, resample))
        self.final_block = Block1D(ups[-1], ups[-1])
        self.final_proj = nn.Conv1d(ups[-1], out_channels, 1)

    def forward(self, x, mask, mu, t, spks, cond) -> torch.Tensor:
        """x, mu, cond [B, M, T]; mask [B, 1, T]; t [B]; spks [B, M] → velocity [B, M, T]."""
        temb = self.time_mlp(t)
        x = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[-1]), cond], dim=1)
        skips, masks = [], [mask]
        for resnet, blocks, resample in self.down_blocks:
            m = masks[-1]
            x = self._transform(resnet(x, m, temb), blocks, m)
            skips.append(x)
            x = resample(x * m)
            masks.append(m[:, :, ::2])
        masks.pop()
        m = masks[-1]
        for resnet, blocks in self.mid_blocks:
            x = self._transform(resnet(x, m, temb), blocks, m)
        for resnet, blocks, resample in self.up_blocks:
            m, skip = masks.pop(), skips.pop()
            x = torch.cat([x[:, :, : skip.shape[-1]], skip], dim=1)
            x = self._transform(resnet(x, m, temb), blocks, m)
            x = resample(x * m)
        x = self.final_block(x, m)
        return self.final_proj(x * m) * mask

    @staticmethod
    def _transform(x: torch.Tensor, blocks: nn.ModuleList, mask: torch.Tensor) -> torch.Tensor:
        # The reference's 0/1 mask product, added to the scores (see the module docstring).
        bias = (mask.transpose(1, 2) @ mask).to(x.dtype)  # [B, T, T]
        h = x.transpose(1, 2)
        for block in blocks:
            h = block(h, bias)
        return h.transpose(1, 2)
