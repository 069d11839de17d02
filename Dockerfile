# GPU image: CUDA torch from the PyTorch base image, FlashInfer from the `gpu` extra.
# A devel image: FlashInfer compiles its kernels with nvcc on first use (the warm-up does it
# before /ready). Any CUDA 12.4+ PyTorch image with nvcc works.
FROM pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel
# eSpeak NG: Zonos reads its text as eSpeak phonemes (models/zonos/phonemes.py).
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY engine engine
COPY models models
COPY gateway gateway
COPY voxbench voxbench
COPY voxgate voxgate
COPY web_demo web_demo
COPY training training
COPY bench bench
# Editable: the gateway serves web_demo/ from beside its package. The extras bring every model
# family's own needs (transformers >= 5.21 for Mimi-based CSM/Moshi; CosyVoice 2's YAML config
# and ONNX voice encoders; Zonos' phonemizer), so one image serves any preset; Ray serves
# --replicas and the compose file's cluster profile (docs/scale-out.md).
RUN pip install --no-cache-dir -e '.[gpu,csm,cosyvoice2,glm-voice,zonos,step-audio2,qwen3-tts,ray]'
EXPOSE 8000
CMD ["voxgate", "serve", "--host", "0.0.0.0", "--port", "8000"]
