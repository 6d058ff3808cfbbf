"""LightningModules written the way people write them with real model libraries (timm, Hugging Face transformers,
diffusers, torchvision under ``torch.compile``, Kornia), tiny configurations built from code (no downloads); the
steps they share with the full-size workloads come from ``examples/workloads.py``.

Each module records its training losses and exposes ``trainable()``: the parameters serial and pipelined training
must end with alike."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from workloads import FrozenParts, latent_diffusion_loss, normalise, timm_features  # examples/workloads.py

SIZE = 32  # image side
TOKENS = 8  # text length
VOCAB = 64


class Samples(Dataset):
    """Dict samples: a uint8 image, a label, token ids and an attention mask (the last tokens padded)."""

    def __init__(self, n: int = 24) -> None:
        g = torch.Generator().manual_seed(3)
        self.image = torch.randint(0, 256, (n, 3, SIZE, SIZE), dtype=torch.uint8, generator=g)
        self.label = torch.randint(0, 4, (n,), generator=g)
        self.ids = torch.randint(1, VOCAB, (n, TOKENS), generator=g)
        lengths = torch.randint(3, TOKENS + 1, (n,), generator=g)
        self.mask = (torch.arange(TOKENS)[None] < lengths[:, None]).long()

    def __len__(self) -> int:
        return len(self.image)

    def __getitem__(self, i: int) -> dict:
        return {"image": self.image[i], "label": self.label[i], "input_ids": self.ids[i] * self.mask[i],
                "attention_mask": self.mask[i]}


def batch_encoding_collate(samples: list[dict]):
    """Hugging Face's batch type (a ``UserDict`` with ``.to``), as a tokenizer returns it."""
    from transformers import BatchEncoding

    return BatchEncoding({k: torch.stack([s[k] for s in samples]) for k in samples[0]})


def loader(batch_size: int = 4, collate=None) -> DataLoader:
    return DataLoader(Samples(), batch_size=batch_size, shuffle=False, collate_fn=collate)


class Zoo(FrozenParts):
    """Common parts: losses recorded, SGD on the trainable parameters, frozen parts kept in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.parameters() if p.requires_grad]

    def record(self, loss: torch.Tensor) -> torch.Tensor:
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.trainable(), lr=0.05)


class TimmProbe(Zoo):
    """A linear probe on a frozen timm model: ``self.backbone(x)`` or, as linear-probe code usually calls timm,
    ``forward_head(forward_features(x), pre_logits=True)``."""

    frozen = ("backbone",)

    def __init__(self, arch: str = "convnext", call: str = "forward") -> None:
        super().__init__()
        import timm

        torch.manual_seed(0)
        if arch == "vit":
            self.backbone = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=0,
                                              img_size=SIZE, patch_size=8, depth=2, embed_dim=48, num_heads=2)
        else:
            self.backbone = timm.create_model("convnext_atto", pretrained=False, num_classes=0)
        self.freeze_parts()
        self.call = call
        self.head = nn.Linear(self.backbone.num_features, 4)

    def training_step(self, batch, batch_idx):
        features = timm_features(self.backbone, normalise(batch["image"]), self.call)
        return self.record(nn.functional.cross_entropy(self.head(features), batch["label"]))


def clip_configs():
    from transformers import CLIPTextConfig, CLIPVisionConfig

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=SIZE, patch_size=8)
    text = CLIPTextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                          vocab_size=VOCAB, max_position_embeddings=TOKENS, bos_token_id=0, eos_token_id=1,
                          pad_token_id=0)
    return vision, text


class ClipTowers(Zoo):
    """CLIP-style training on frozen Hugging Face towers, called with keyword arguments: the vision tower
    (``pixel_values=``) and the text tower (``input_ids=``, ``attention_mask=``), each returning a
    ``ModelOutput``; two trainable projections and a contrastive loss. ``how="features"`` calls the whole
    ``CLIPModel`` through ``get_image_features`` / ``get_text_features`` instead."""

    def __init__(self, how: str = "towers") -> None:
        super().__init__()
        from transformers import CLIPConfig, CLIPModel, CLIPTextModel, CLIPVisionModel

        torch.manual_seed(0)
        vision, text = clip_configs()
        self.how = how
        if how == "features":
            self.clip = CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                             projection_dim=16))
            self.frozen = ("clip",)
            width = 16
        else:
            self.vision, self.text = CLIPVisionModel(vision), CLIPTextModel(text)
            self.frozen = ("vision", "text")
            width = 32
        self.freeze_parts()
        self.image_proj, self.text_proj = nn.Linear(width, 16), nn.Linear(width, 16)

    def training_step(self, batch, batch_idx):
        pixels = normalise(batch["image"])
        if self.how == "features":
            image = _pooled(self.clip.get_image_features(pixel_values=pixels))
            text = _pooled(self.clip.get_text_features(input_ids=batch["input_ids"],
                                                       attention_mask=batch["attention_mask"]))
        else:
            image = self.vision(pixel_values=pixels).pooler_output
            text = self.text(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output
        a = nn.functional.normalize(self.image_proj(image), dim=-1)
        b = nn.functional.normalize(self.text_proj(text), dim=-1)
        logits = a @ b.t() * 10
        target = torch.arange(len(logits), device=logits.device)
        return self.record((nn.functional.cross_entropy(logits, target) + nn.functional.cross_entropy(logits.t(), target)) / 2)


def _pooled(out):
    """``get_*_features`` returns a tensor (transformers 4) or a ``ModelOutput`` (5)."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


class LatentDiffusion(Zoo):
    """Latent-diffusion fine-tuning as diffusers' training scripts write it: a frozen VAE encoder
    (``vae.encode(x).latent_dist.sample() * scaling_factor``), a frozen text encoder
    (``text_encoder(input_ids)[0]``), noise and timesteps drawn in the step, and a small trainable
    ``UNet2DConditionModel`` predicting the noise."""

    frozen = ("vae", "text_encoder")

    def __init__(self) -> None:
        super().__init__()
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from transformers import CLIPTextModel

        torch.manual_seed(0)
        self.vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                                 up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                                 latent_channels=4, norm_num_groups=4, layers_per_block=1)
        self.text_encoder = CLIPTextModel(clip_configs()[1])
        self.unet = UNet2DConditionModel(sample_size=SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
                                         block_out_channels=(8, 16), norm_num_groups=4, attention_head_dim=4,
                                         down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                         up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32)
        self.freeze_parts()

    def training_step(self, batch, batch_idx):
        return self.record(latent_diffusion_loss(self, batch))


class CompiledBackbone(Zoo):
    """A frozen torchvision ResNet under ``torch.compile`` (``backend``: "inductor" on a GPU; the CPU tests use
    "eager", which wraps the module the same way without a C++ build)."""

    frozen = ("backbone",)

    def __init__(self, backend: str = "eager") -> None:
        super().__init__()
        import torchvision

        torch.manual_seed(0)
        net = torchvision.models.resnet18(weights=None, num_classes=10)
        net.fc = nn.Identity()
        net.requires_grad_(False).eval()
        self.backbone = torch.compile(net, backend=backend)
        self.head = nn.Linear(512, 4)

    def training_step(self, batch, batch_idx):
        features = self.backbone(normalise(batch["image"]))
        return self.record(nn.functional.cross_entropy(self.head(features), batch["label"]))


class KorniaAugmented(Zoo):
    """Lightning's documented GPU augmentation: a Kornia ``AugmentationSequential`` in
    ``on_after_batch_transfer``, training only; a timm CNN trained on the result. Kornia draws from the global
    RNG: for results equal to serial training, each batch's draws are seeded by the batch count (the documented
    rule for augmentations on the global generator)."""

    def __init__(self, seeded: bool = True) -> None:
        super().__init__()
        import kornia.augmentation as K
        import timm

        torch.manual_seed(0)
        self.augment = K.AugmentationSequential(K.RandomHorizontalFlip(), K.RandomAffine(degrees=15, p=0.5),
                                                K.ColorJitter(0.2, 0.2, 0.2, 0.1, p=0.5))
        self.model = timm.create_model("resnet10t", pretrained=False, num_classes=4)
        self.seeded = seeded
        self.augmented = 0

    def on_after_batch_transfer(self, batch, dataloader_idx):
        x = batch["image"].float() / 255
        if self.trainer.training:
            if self.seeded:
                devices = [x.device] if x.is_cuda else []
                with torch.random.fork_rng(devices=devices, device_type=x.device.type):
                    torch.manual_seed(1000 + self.augmented)
                    x = self.augment(x)
            else:
                x = self.augment(x)
            self.augmented += 1
        return {**batch, "image": x}

    def training_step(self, batch, batch_idx):
        return self.record(nn.functional.cross_entropy(self.model(batch["image"]), batch["label"]))
