#!/usr/bin/env python3
"""What a LitGPT LoRA/QLoRA layer keeps for backward, counted by PyTorch's own autograd.

Builds one- and two-layer LitGPT models from a LitGPT checkout (the lit_gpt package of
commit 8641822 was used for docs/memory.md), runs a forward pass under
torch.autograd.graph.saved_tensors_hooks and sums the distinct storages the graph keeps,
parameters and buffers excluded. The difference between the two models is one layer.

  python3 calibrate/autograd_census.py LITGPT_DIR [MODEL] [TOKENS] [lora|qlora]

Stand-ins (CPU, no CUDA needed): FlashAttention keeps q, k, v, its output and the fp32
log-sum-exp, as PyTorch 2.1's flash SDPA does; a 4-bit base linear keeps its input outside
save_for_backward, as bitsandbytes 0.41.1's MatMul4Bit does (ctx.tensors = (A, B)). On CPU
dropout keeps a 16-bit mask where CUDA's fused kernel keeps 1 byte: subtract 1 h per
adapted input for a GPU figure.
"""
import math
import sys
import types


def stub_modules():
    # lit_gpt imports these for loading and distribution only.
    class RequirementCache:
        def __init__(self, *a, **k):
            pass

        def __bool__(self):
            return False

    mods = {
        "lightning_utilities": {},
        "lightning_utilities.core": {},
        "lightning_utilities.core.imports": {"RequirementCache": RequirementCache},
        "lightning": {"Fabric": type("Fabric", (), {})},
        "lightning.fabric": {},
        "lightning.fabric.strategies": {"FSDPStrategy": type("FSDPStrategy", (), {})},
        "lightning.fabric.utilities": {},
        "lightning.fabric.utilities.load": {"_lazy_load": None},
        "torch.utils._device": {},
    }
    for name, attrs in mods.items():
        if name == "torch.utils._device" and "torch.utils._device" in sys.modules:
            continue
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules.setdefault(name, m)


def main():
    litgpt_dir = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else "Llama-2-7b-hf"
    T = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    qlora = len(sys.argv) > 4 and sys.argv[4] == "qlora"
    stub_modules()
    sys.path.insert(0, litgpt_dir)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    # lit_gpt/__init__.py pulls in the tokenizer; load the two modules the census needs.
    pkg = types.ModuleType("lit_gpt")
    pkg.__path__ = [litgpt_dir + "/lit_gpt"]
    sys.modules["lit_gpt"] = pkg
    import lit_gpt.model  # noqa: F401  (before config: the package imports them in this order)
    import lit_gpt.lora as L

    class FlashLike(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, scale):
            with torch.no_grad():
                s = (q.float() @ k.float().transpose(-2, -1)) * scale
                n = q.shape[-2]
                s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
                lse = torch.logsumexp(s, -1)
                o = (torch.softmax(s, -1) @ v.float()).to(q.dtype)
                o = o.transpose(1, 2).contiguous().transpose(1, 2)  # (B, T, nh, hs) storage
            ctx.save_for_backward(q, k, v, o, lse)
            return o

        @staticmethod
        def backward(ctx, g):
            raise NotImplementedError

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, scale=None, is_causal=False):
        return FlashLike.apply(q, k, v, scale or 1 / math.sqrt(q.shape[-1]))

    F.scaled_dot_product_attention = sdpa
    held = []

    class MatMul4BitLike(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, w):
            if ctx.needs_input_grad[0]:
                ctx.tensors = (a,)
                held.append(a)
            return F.linear(a, w)

        @staticmethod
        def backward(ctx, g):
            raise NotImplementedError

    class Q4Linear(nn.Linear):
        def forward(self, x):
            return MatMul4BitLike.apply(x, self.weight)

    def run(n_layer):
        torch.manual_seed(0)
        c = L.Config.from_name(name, n_layer=n_layer, r=8, alpha=16, dropout=0.05, to_query=True, to_value=True)
        torch.set_default_dtype(torch.bfloat16)
        model = L.GPT(c)
        torch.set_default_dtype(torch.float32)
        L.mark_only_lora_as_trainable(model)
        if qlora:
            for mod in list(model.modules()):
                for cname, child in list(mod.named_children()):
                    if type(child) is nn.Linear:
                        q = Q4Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                     dtype=child.weight.dtype)
                        q.weight.requires_grad_(False)
                        setattr(mod, cname, q)
        model.max_seq_length = T  # rebuilt outside the init context, as finetune/lora.py does
        model.train()
        skip = {p.data_ptr() for p in model.parameters()} | {b.data_ptr() for b in model.buffers()}
        kept = {}

        def pack(t):
            ptr = t.storage().data_ptr()
            if ptr not in skip:
                kept[ptr] = t.storage().size() * t.element_size()
            return t

        held.clear()
        idx = torch.randint(0, c.padded_vocab_size, (1, T))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(idx, lm_head_chunk_size=128)
        for a in held:
            ptr = a.storage().data_ptr()
            if ptr not in skip:
                kept[ptr] = a.storage().size() * a.element_size()
        return sum(kept.values()), c.n_embd

    one, h = run(1)
    two, _ = run(2)
    layer = (two - one) / T
    print(f"{name} {'QLoRA' if qlora else 'LoRA'}: one layer keeps {layer:.0f} bytes a token = {layer / h:.2f} h")


if __name__ == "__main__":
    main()
