"""Hugging Face `transformers` models on tpu vs cpu, with the CPU fallback off (conftest.py refuses a run with
TORCH_TPU_CPU_FALLBACK set), so an op the device lacks raises NotImplementedError and fails its test: no count of
fallbacks to check.

No hub downloads: every model is built from a tiny config with random weights (seed 0) and copied to
both devices, so both start from the same weights.
- f32, dropout off: 3 AdamW steps on one batch. The losses agree within 1e-4 relative at every step, and
  after the first backward every parameter's gradient agrees with the CPU's (rtol 1e-3, atol 1e-4 times the
  model's largest gradient: attention key biases get mathematically zero gradients that are pure rounding
  noise on both devices).
- bf16 autocast (dropout off): the first loss is within 2e-2 relative of CPU autocast's, and 6 steps on the
  fixed batch lower it.
- dropout on (the device's own RNG): the loss still goes down.
- generate(): greedy decoding gives the CPU's tokens; sampling and beam search run.
- torch.compile(backend="tpu", strict) of a Llama training step: loss and gradients as on the CPU.
The whole file is skipped when transformers is not importable (`make test` installs the pinned version).
"""
from __future__ import annotations

import copy

import pytest
import torch

import torch_tpu  # noqa: F401  (the tpu device)

T = pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (the Makefile's venv pins it)")

V = 97  # vocabulary of every tiny text model
_D = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)


# name -> (model class, config factory, batch kind). Tiny: 2 layers, width 32 (or less).
MODELS = {
    "gpt2": (T.GPT2LMHeadModel, lambda: T.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4), "lm"),
    "llama": (T.LlamaForCausalLM, lambda: T.LlamaConfig(vocab_size=V, num_key_value_heads=2, **_D), "lm"),
    "llama_eager": (T.LlamaForCausalLM, lambda: T.LlamaConfig(vocab_size=V, num_key_value_heads=2, attn_implementation="eager",
                                                              **_D), "lm"),
    "qwen2": (T.Qwen2ForCausalLM, lambda: T.Qwen2Config(vocab_size=V, num_key_value_heads=2, **_D), "lm"),
    "qwen3": (T.Qwen3ForCausalLM, lambda: T.Qwen3Config(vocab_size=V, num_key_value_heads=2, head_dim=8, **_D), "lm"),
    "mistral": (T.MistralForCausalLM, lambda: T.MistralConfig(vocab_size=V, num_key_value_heads=2, sliding_window=8, **_D), "lm"),
    "gemma2": (T.Gemma2ForCausalLM, lambda: T.Gemma2Config(vocab_size=V, head_dim=8, num_key_value_heads=2, sliding_window=8,
                                                          **_D), "lm"),
    "phi3": (T.Phi3ForCausalLM, lambda: T.Phi3Config(vocab_size=V, num_key_value_heads=2, pad_token_id=0, **_D), "lm"),
    "mixtral": (T.MixtralForCausalLM, lambda: T.MixtralConfig(vocab_size=V, num_key_value_heads=2, num_local_experts=4,
                                                             num_experts_per_tok=2, **_D), "lm"),
    "qwen2_moe": (T.Qwen2MoeForCausalLM, lambda: T.Qwen2MoeConfig(vocab_size=V, num_key_value_heads=2, num_experts=4,
                                                                 num_experts_per_tok=2, moe_intermediate_size=16,
                                                                 shared_expert_intermediate_size=32, **_D), "lm"),
    "gpt_neox": (T.GPTNeoXForCausalLM, lambda: T.GPTNeoXConfig(vocab_size=V, **_D), "lm"),
    "opt": (T.OPTForCausalLM, lambda: T.OPTConfig(vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                                 num_attention_heads=4, max_position_embeddings=64,
                                                 word_embed_proj_dim=32), "lm"),
    "bloom": (T.BloomForCausalLM, lambda: T.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4), "lm"),
    "falcon": (T.FalconForCausalLM, lambda: T.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=4), "lm"),
    "mamba": (T.MambaForCausalLM, lambda: T.MambaConfig(vocab_size=V, hidden_size=32, state_size=4, num_hidden_layers=2,
                                                       expand=2, conv_kernel=4), "lm"),
    "bert": (T.BertForMaskedLM, lambda: T.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                    intermediate_size=64, max_position_embeddings=64), "mlm"),
    "roberta": (T.RobertaForMaskedLM, lambda: T.RobertaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                             num_attention_heads=4, intermediate_size=64,
                                                             max_position_embeddings=64), "mlm"),
    "deberta_v2": (T.DebertaV2ForMaskedLM, lambda: T.DebertaV2Config(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                                    num_attention_heads=4, intermediate_size=64,
                                                                    max_position_embeddings=64, relative_attention=True,
                                                                    position_buckets=8, pos_att_type=["p2c", "c2p"]), "mlm"),
    "modernbert": (T.ModernBertForMaskedLM, lambda: T.ModernBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                                      num_attention_heads=4, intermediate_size=64,
                                                                      max_position_embeddings=64, local_attention=8,
                                                                      pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                                      sep_token_id=2, cls_token_id=1), "mlm"),
    "t5": (T.T5ForConditionalGeneration, lambda: T.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                           num_heads=4, decoder_start_token_id=0), "s2s"),
    "bart": (T.BartForConditionalGeneration, lambda: T.BartConfig(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2,
                                                                 encoder_attention_heads=4, decoder_attention_heads=4,
                                                                 encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                                 max_position_embeddings=64), "s2s"),
    "whisper": (T.WhisperForConditionalGeneration, lambda: T.WhisperConfig(vocab_size=V, num_mel_bins=8, d_model=32,
                                                                          encoder_layers=2, decoder_layers=2,
                                                                          encoder_attention_heads=4, decoder_attention_heads=4,
                                                                          encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                                          max_source_positions=8, max_target_positions=16,
                                                                          decoder_start_token_id=1, pad_token_id=0), "speech"),
    "wav2vec2": (T.Wav2Vec2ForCTC, lambda: T.Wav2Vec2Config(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                           num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                                                           conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
                                                           num_conv_pos_embedding_groups=2, num_feat_extract_layers=2,
                                                           mask_time_prob=0.0, pad_token_id=0), "ctc"),
    "vit": (T.ViTForImageClassification, lambda: T.ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
                                                            num_attention_heads=4, intermediate_size=64, num_labels=5), "img"),
    "swin": (T.SwinForImageClassification, lambda: T.SwinConfig(image_size=16, patch_size=2, embed_dim=8, depths=[1, 1],
                                                               num_heads=[2, 2], window_size=4, num_labels=5), "img"),
    "convnext": (T.ConvNextForImageClassification, lambda: T.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16],
                                                                           depths=[1, 1], num_labels=5), "img"),
    "resnet": (T.ResNetForImageClassification, lambda: T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                                                                     depths=[1, 1], num_labels=5), "img"),
    "clip": (T.CLIPModel, lambda: T.CLIPConfig(
        text_config=dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         max_position_embeddings=32),
        vision_config=dict(image_size=16, patch_size=4, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4),
        projection_dim=16), "clip"),
}


def _params(names, fast=("llama",)):
    """names as test ids; all but `fast` are marked slow (`-m "not slow"` keeps a quick check)"""
    return [pytest.param(n, id=n, marks=[] if n in fast else [pytest.mark.slow]) for n in names]


def _batch(kind: str) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (2, 13), generator=g)
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 10:] = 0  # the second row is padded
    if kind == "lm":
        return dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
    if kind == "mlm":
        return dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
    if kind == "s2s":
        return dict(input_ids=ids[:, :11], labels=ids[:, 3:10].contiguous())
    if kind == "speech":
        return dict(input_features=torch.randn(2, 8, 16, generator=g), labels=ids[:, :7].contiguous())
    if kind == "ctc":
        return dict(input_values=torch.randn(2, 300, generator=g), labels=ids[:, :5].contiguous())
    if kind == "img":
        return dict(pixel_values=torch.randn(2, 3, 16, 16, generator=g), labels=torch.tensor([1, 3]))
    if kind == "clip":
        return dict(input_ids=ids[:, :9], pixel_values=torch.randn(2, 3, 16, 16, generator=g), return_loss=True)
    raise ValueError(kind)


def _no_dropout(cfg) -> None:
    """Every dropout / drop-path probability of a config (and its sub-configs) set to 0."""
    for k, v in list(vars(cfg).items()):
        if isinstance(v, float) and ("dropout" in k or "drop_path" in k or k.endswith("_pdrop") or k == "layerdrop"):
            setattr(cfg, k, 0.0)
        elif isinstance(v, T.PretrainedConfig):
            _no_dropout(v)


def _make(name: str, dropout: bool = False) -> tuple[torch.nn.Module, dict]:
    """The model with random weights (seed 0) and its batch; dropout (and drop-path) off unless asked."""
    cls, config, kind = MODELS[name]
    cfg = config()
    if not dropout:
        _no_dropout(cfg)
    torch.manual_seed(0)
    return cls(cfg), _batch(kind)


def _steps(model0, batch, device, steps, amp=False, lr=1e-3):
    model = copy.deepcopy(model0).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    b = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    losses, grads = [], None
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = model(**b).loss
        loss.backward()
        if grads is None:
            grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        losses.append(loss.item())
    return losses, grads


@pytest.mark.parametrize("name", _params(MODELS, fast=("llama", "bert", "t5")))
def test_f32_train_steps_match_cpu(name):
    model, batch = _make(name)
    cpu_losses, cpu_grads = _steps(model, batch, "cpu", 3)
    tpu_losses, tpu_grads = _steps(model, batch, "tpu", 3)
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=0)
    assert tpu_grads.keys() == cpu_grads.keys()
    scale = max(g.abs().max().item() for g in cpu_grads.values())
    for n, g in cpu_grads.items():
        torch.testing.assert_close(tpu_grads[n], g, rtol=1e-3, atol=1e-4 * scale, msg=lambda m, n=n: f"{name} {n}: {m}")


@pytest.mark.parametrize("name", _params(["llama", "gpt2", "bert", "t5", "mixtral", "whisper", "vit", "convnext"]))
def test_bf16_autocast_close_and_loss_decreases(name):
    model, batch = _make(name)
    cpu, _ = _steps(model, batch, "cpu", 1, amp=True)
    tpu, _ = _steps(model, batch, "tpu", 6, amp=True, lr=3e-3)
    assert abs(tpu[0] - cpu[0]) <= 2e-2 * abs(cpu[0]), (tpu[0], cpu[0])
    assert tpu[-1] < tpu[0], tpu


@pytest.mark.parametrize("name", _params(["bert", "bart"], fast=()))
def test_dropout_training_loss_decreases(name):
    model, batch = _make(name, dropout=True)  # default dropout 0.1, drawn from the device's generator
    torch.tpu.manual_seed(0)
    tpu, _ = _steps(model, batch, "tpu", 6, lr=3e-3)
    assert tpu[-1] < tpu[0], tpu


@pytest.mark.parametrize("name", _params(["llama", "gpt2", "t5"]))
def test_generate_greedy_matches_cpu(name):
    model, batch = _make(name)
    prompt = batch["input_ids"][:, :5]
    out = {}
    for dev in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(dev).eval()
        with torch.no_grad():
            out[dev] = m.generate(prompt.to(dev), max_new_tokens=6, do_sample=False, pad_token_id=0).cpu()
    assert torch.equal(out["tpu"], out["cpu"]), (out["tpu"], out["cpu"])
    m = copy.deepcopy(model).to("tpu").eval()
    with torch.no_grad():
        torch.manual_seed(3)
        s = m.generate(prompt.to("tpu"), max_new_tokens=4, do_sample=True, top_k=20, top_p=0.9, temperature=0.8,
                       pad_token_id=0)
        b = m.generate(prompt.to("tpu"), max_new_tokens=4, num_beams=3, pad_token_id=0)
    assert s.device.type == b.device.type == "tpu" and s.shape[0] == b.shape[0] == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama"])
def test_compiled_train_step_matches_cpu(name):
    # torch.compile(backend="tpu") on a whole HF training step (forward + backward), strict: no graph breaks
    # into eager ops the device lacks
    model, batch = _make(name)
    res = {}
    for dev in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(dev).train()
        b = {k: v.to(dev) for k, v in batch.items()}

        def step(**kw):
            loss = m(**kw).loss
            loss.backward()
            return loss

        f = torch.compile(step, backend="tpu", options={"strict": True}) if dev == "tpu" else step
        loss = f(**b)
        res[dev] = (loss.item(), {n: p.grad.detach().cpu() for n, p in m.named_parameters() if p.grad is not None})
    torch.testing.assert_close(torch.tensor(res["tpu"][0]), torch.tensor(res["cpu"][0]), rtol=1e-4, atol=0)
    scale = max(g.abs().max().item() for g in res["cpu"][1].values())
    for n, g in res["cpu"][1].items():
        torch.testing.assert_close(res["tpu"][1][n], g, rtol=1e-3, atol=1e-4 * scale)
