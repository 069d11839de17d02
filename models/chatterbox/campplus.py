"""CAM++ (s3gen.safetensors' `speaker_encoder.*`): a 16 kHz clip → S3Gen's 192-value x-vector.

Kaldi fbank (80 bins, mean removed: CosyVoice 2's features.kaldi_fbank, the published
frontend's), a 2-D convolutional head (FCM: two residual stages, each halving the frequency
axis, then one more halving), a strided TDNN layer, three densely connected blocks of
context-aware-masking TDNN layers (CAM: each layer's output gated by a sigmoid of its
input's utterance and 100-frame segment means) with transition layers between them, mean +
standard-deviation pooling over time, and a dense layer with a non-affine batch norm.
CosyVoice 2 runs the same network from campplus.onnx; Chatterbox ships it as PyTorch weights.
Module names follow the published CAMPPlus, and its sizes are read off the tensors (the
published: 32 head channels, 128 TDNN channels, blocks of 12, 24 and 16 layers growing 32
channels each), so a scaled-down checkpoint loads through the same code."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from models.checkpoint_errors import CheckpointError, check_state_dict

PREFIX = "speaker_encoder."
FEATS = 80
DILATIONS = (1, 2, 2)  # the three blocks' dilations (kernel 3 each)
SEGMENT = 100  # CAM's segment pooling, frames


@dataclass(frozen=True)
class CamSizes:
    head_channels: int = 32
    init_channels: int = 128
    growth: int = 32
    bottleneck: int = 128  # bn_size (4) x growth
    block_layers: tuple[int, int, int] = (12, 24, 16)
    embedding: int = 192


def _bn_relu(channels: int, affine: bool = True) -> nn.Sequential:
    """get_nonlinear("batchnorm-relu") (or "batchnorm_": no affine, no ReLU)."""
    if not affine:
        return nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(channels, affine=False)))
    return nn.Sequential(OrderedDict(batchnorm=nn.BatchNorm1d(channels), relu=nn.ReLU()))


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class Head(nn.Module):
    """FCM: [B, 80, T] → [B, channels x 10, T]."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.layer1 = nn.Sequential(ResBlock(c, c, 2), ResBlock(c, c, 1))
        self.layer2 = nn.Sequential(ResBlock(c, c, 2), ResBlock(c, c, 1))
        self.conv2 = nn.Conv2d(c, c, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x[:, None])))
        out = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(out)))))
        return out.flatten(1, 2)


class Tdnn(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 5, stride=2, padding=2, bias=False)
        self.nonlinear = _bn_relu(cout)

    def forward(self, x):
        return self.nonlinear(self.linear(x))


class CamLayer(nn.Module):
    def __init__(self, cin: int, cout: int, dilation: int) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(cin, cout, 3, padding=dilation, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(cin, cin // 2, 1)
        self.linear2 = nn.Conv1d(cin // 2, cout, 1)

    def forward(self, x):
        seg = F.avg_pool1d(x, SEGMENT, SEGMENT, ceil_mode=True)
        seg = seg.repeat_interleave(SEGMENT, dim=-1)[..., : x.shape[-1]]
        context = F.relu(self.linear1(x.mean(-1, keepdim=True) + seg))
        return self.linear_local(x) * torch.sigmoid(self.linear2(context))


class DenseTdnnLayer(nn.Module):
    def __init__(self, cin: int, sizes: CamSizes, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(cin)
        self.linear1 = nn.Conv1d(cin, sizes.bottleneck, 1, bias=False)
        self.nonlinear2 = _bn_relu(sizes.bottleneck)
        self.cam_layer = CamLayer(sizes.bottleneck, sizes.growth, dilation)

    def forward(self, x):
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class DenseBlock(nn.ModuleDict):
    def forward(self, x):
        for layer in self.values():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class Transit(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x):
        return self.linear(self.nonlinear(x))


class StatsPool(nn.Module):
    def forward(self, x):
        return torch.cat([x.mean(dim=-1), x.std(dim=-1)], dim=-1)


class Dense(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)
        self.nonlinear = _bn_relu(cout, affine=False)

    def forward(self, x):
        return self.nonlinear(self.linear(x[..., None])[..., 0])


class CamPlus(nn.Module):
    def __init__(self, sizes: CamSizes = CamSizes()) -> None:
        super().__init__()
        self.sizes = sizes
        self.head = Head(sizes.head_channels)
        channels = sizes.head_channels * (FEATS // 8)
        layers = OrderedDict(tdnn=Tdnn(channels, sizes.init_channels))
        channels = sizes.init_channels
        for i, (count, dilation) in enumerate(zip(sizes.block_layers, DILATIONS, strict=True)):
            block = DenseBlock()
            for j in range(count):
                block[f"tdnnd{j + 1}"] = DenseTdnnLayer(
                    channels + j * sizes.growth, sizes, dilation
                )
            layers[f"block{i + 1}"] = block
            channels += count * sizes.growth
            layers[f"transit{i + 1}"] = Transit(channels, channels // 2)
            channels //= 2
        layers["out_nonlinear"] = _bn_relu(channels)
        layers["stats"] = StatsPool()
        layers["dense"] = Dense(2 * channels, sizes.embedding)
        self.xvector = nn.Sequential(layers)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """fbank [B, T, 80] → x-vectors [B, 192]."""
        return self.xvector(self.head(feats.transpose(1, 2)))

    @torch.inference_mode()
    def embed_clip(self, audio16k: np.ndarray) -> torch.Tensor:
        """A 16 kHz clip → its x-vector [192] (CAMPPlus.inference)."""
        from models.cosyvoice2.features import kaldi_fbank

        feats = torch.from_numpy(kaldi_fbank(np.asarray(audio16k, dtype=np.float32)))
        if feats.shape[0] < 2:
            raise ValueError("the reference clip is too short for the speaker encoder")
        device = self.head.conv1.weight.device
        return self(feats[None].to(device))[0].float().cpu()


def cam_sizes(state: dict[str, torch.Tensor]) -> CamSizes:
    def count(prefix: str) -> int:
        n = 0
        while f"{prefix}tdnnd{n + 1}.linear1.weight" in state:
            n += 1
        return n

    try:
        x = PREFIX + "xvector."
        layer = state[x + "block1.tdnnd1.cam_layer.linear_local.weight"]
        return CamSizes(
            head_channels=state[PREFIX + "head.conv1.weight"].shape[0],
            init_channels=state[x + "tdnn.linear.weight"].shape[0],
            growth=layer.shape[0],
            bottleneck=layer.shape[1],
            block_layers=tuple(count(f"{x}block{i}.") for i in (1, 2, 3)),
            embedding=state[x + "dense.linear.weight"].shape[0],
        )
    except KeyError as missing:
        raise CheckpointError(f"s3gen.safetensors lacks the tensor {missing}") from None


def has_campplus(state: dict[str, torch.Tensor]) -> bool:
    return PREFIX + "head.conv1.weight" in state


def load_campplus(state: dict[str, torch.Tensor]) -> CamPlus:
    own = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    model = CamPlus(cam_sizes(state))
    check_state_dict(model.state_dict(), own, "s3gen.safetensors' speaker encoder (CAM++)")
    model.load_state_dict(own)
    return model.eval()
