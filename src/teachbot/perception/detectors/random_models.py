"""Random-weight stand-ins for the learned backends' weights, written in the same on-disk formats as
the real ones, so tests and benchmarks run the real loading and inference code offline.

Architectures are the real ones (ultralytics' yolov8*-worldv2 yaml; transformers' CLIP text and OWLv2
configs); only the weights are random and the tokenizer has a tiny byte-level vocabulary. Detections
from these models are meaningless: they exercise shapes, types and timing, never accuracy.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

# transformers configs of the released models the backends are meant for (architecture only)
CLIP_VIT_B32_TEXT: dict[str, Any] = {  # openai/clip-vit-base-patch32, text tower + projection
    "hidden_size": 512,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "max_position_embeddings": 77,
    "vocab_size": 49408,
    "projection_dim": 512,
}
OWLV2_BASE_PATCH16: dict[str, Any] = {  # google/owlv2-base-patch16-ensemble
    "text_config": {
        "hidden_size": 512,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "max_position_embeddings": 16,
        "vocab_size": 49408,
    },
    "vision_config": {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "image_size": 960,
        "patch_size": 16,
    },
    "projection_dim": 512,
}


def _byte_symbols() -> list[str]:
    """CLIP's (GPT-2's) printable stand-in character for each of the 256 bytes, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


BYTE_VOCAB_SPECIAL_IDS = {"bos_token_id": 512, "eos_token_id": 513, "pad_token_id": 513}  # of clip_tokenizer()


def clip_tokenizer(model_max_length: int) -> Any:
    """A CLIP BPE tokenizer with a byte-level vocabulary (514 ids) built offline: every text tokenizes,
    one token per byte."""
    from transformers import CLIPTokenizer  # deferred: transformers

    symbols = _byte_symbols()
    vocab = [*symbols, *(s + "</w>" for s in symbols), "<|startoftext|>", "<|endoftext|>"]
    return CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=[], model_max_length=model_max_length)


def save_clip_text_model(directory: str | Path, seed: int = 0, **config: Any) -> Path:
    """A random-weight CLIPTextModelWithProjection and tokenizer saved to ``directory`` (config overrides
    the ViT-B/32 text tower above)."""
    import torch  # deferred: torch
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection  # deferred: transformers

    directory = Path(directory)
    # the text embedding is read at the end-of-text token, so the config must know the tokenizer's ids
    cfg = CLIPTextConfig(**{**CLIP_VIT_B32_TEXT, **BYTE_VOCAB_SPECIAL_IDS, **config})
    torch.manual_seed(seed)
    CLIPTextModelWithProjection(cfg).save_pretrained(directory)
    clip_tokenizer(cfg.max_position_embeddings).save_pretrained(directory)
    return directory


def save_yolo_world(path: str | Path, arch: str = "yolov8s-worldv2.yaml", seed: int = 0) -> Path:
    """A random-weight YOLO-World checkpoint at ``path`` in ultralytics' format, built from the model yaml
    ``arch`` that ultralytics ships (scale from the name: n/s/m/l/x)."""

    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["YOLO_AUTOINSTALL"] = "false"
    import torch  # deferred: torch
    from ultralytics.nn.tasks import WorldModel  # deferred: ultralytics

    torch.manual_seed(seed)
    model = WorldModel(arch, verbose=False)
    path = Path(path)
    torch.save({"model": copy.deepcopy(model).half(), "train_args": {}, "date": None, "version": "random"}, path)
    return path


def save_owlv2(directory: str | Path, seed: int = 0, config: dict[str, Any] | None = None) -> Path:
    """A random-weight Owlv2ForObjectDetection with its processor saved to ``directory`` (``config`` as
    for Owlv2Config; default: the owlv2-base-patch16 architecture)."""
    import torch  # deferred: torch
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2Processor  # deferred: transformers
    from transformers.models.owlv2.image_processing_pil_owlv2 import Owlv2ImageProcessorPil  # deferred: transformers

    directory = Path(directory)
    config = copy.deepcopy(config or OWLV2_BASE_PATCH16)
    config["text_config"] = {**BYTE_VOCAB_SPECIAL_IDS, **config.get("text_config", {})}
    cfg = Owlv2Config(**config)
    torch.manual_seed(seed)
    Owlv2ForObjectDetection(cfg).save_pretrained(directory)
    side = cfg.vision_config.image_size
    processor = Owlv2Processor(
        image_processor=Owlv2ImageProcessorPil(size={"height": side, "width": side}),
        tokenizer=clip_tokenizer(cfg.text_config.max_position_embeddings),
    )
    processor.save_pretrained(directory)
    return directory
