"""A tiny random Llama in Hugging Face format, built locally: nothing is downloaded.

The tokenizer is a byte-level BPE trained on a generated corpus; the weights are
random (seeded). vLLM loads it like any HF checkpoint, so the real engine runs its
real scheduler, prefix cache and detokenizer over it. head_dim is 64, which the
CPU attention kernels support.
"""

from __future__ import annotations

import json
from pathlib import Path

# Hermes-style tools: the functions in a system turn, calls as <tool_call>JSON</tool_call>
# (what vLLM's ``hermes`` tool parser reads), results as ``tool`` turns.
CHAT_TEMPLATE = (
    "{% if tools %}<|system|>\nFunctions: {{ tools | tojson }}\nCall one as "
    '<tool_call>{"name": NAME, "arguments": ARGS}</tool_call><|end|>\n{% endif %}'
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}<tool_call>"
    "{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}"
    "</tool_call>{% endfor %}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<unk>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
WORDS = (
    "the a of to and in is it you that he was for on are with as his they be at one have this "
    "from or had by word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new "
    "work part take get place made live where after back little only round man year came show"
).split()


def _corpus(lines: int = 3000) -> list[str]:
    import random

    rng = random.Random(7)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def build_tiny_llama(
    folder: Path, *, vocab_size: int = 2048, layers: int = 2, max_positions: int = 2048
) -> Path:
    """Write config, safetensors weights and tokenizer into ``folder``; return it
    (``max_positions``: the longest context it takes, e.g. an agent's whole session)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        additional_special_tokens=SPECIAL[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=max_positions,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.convert_tokens_to_ids("<|end|>"),
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        # Special tokens and stray bytes score 0 while ASCII pieces score at random: greedy
        # decoding then writes visible text, not tokens the detokenizer skips or holds back.
        silent = [
            i
            for i in range(len(fast))
            if i in fast.all_special_ids or not fast.decode([i]).isascii() or not fast.decode([i])
        ]
        model.lm_head.weight[silent] = 0
    model.save_pretrained(str(folder))
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    return folder


if __name__ == "__main__":
    import sys

    print(build_tiny_llama(Path(sys.argv[1])))
