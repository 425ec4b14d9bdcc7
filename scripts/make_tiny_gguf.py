"""Write a tiny random-weight Llama as a GGUF file for llama.cpp's ``llama-server``.

    python scripts/make_tiny_gguf.py OUT.gguf [--seed 0] [--context 16384]

The shape is the tiny Llama that ``scripts/vllm_cpu.sh`` serves: 2 layers, hidden 256,
4 heads of 64, FFN 512, vocab 32000, f16 weights (f32 norms), about 36 MB. Nothing is
downloaded: the weights are seeded random numbers and the vocabulary is made up.

The vocabulary is SentencePiece-style (``tokenizer.ggml.model = "llama"``): id 0 ``<unk>``,
1 ``<s>`` (BOS), 2 ``</s>`` (EOS), 3..258 the byte-fallback tokens ``<0x00>``..``<0xFF>``,
then plain ASCII pieces (``▁t259`` ...) so that every generated normal token decodes to
non-empty text. workbench sends token-id prompts, so the text side is never tokenized in a
test; it only has to load. Requires the ``gguf`` package (``pip install gguf``; it is in
workbench's ``test`` extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

VOCAB = 32000
HIDDEN = 256
FFN = 512
LAYERS = 2
HEADS = 4
KV_HEADS = 4
HEAD_DIM = HIDDEN // HEADS
RMS_EPS = 1e-6
ROPE_THETA = 10000.0


def vocabulary() -> tuple[list[bytes], list[float], list[int]]:
    """(pieces, scores, token types) of the made-up SentencePiece vocabulary."""
    from gguf import TokenType

    pieces = [b"<unk>", b"<s>", b"</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    for b in range(256):
        pieces.append(f"<0x{b:02X}>".encode())
        types.append(TokenType.BYTE)
    for i in range(len(pieces), VOCAB):
        pieces.append(f"\u2581t{i}".encode())
        types.append(TokenType.NORMAL)
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(VOCAB - 259)]
    return pieces, scores, [int(t) for t in types]


def tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Llama weights in GGUF naming; numpy shapes are (out, in)."""

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    out = {
        "token_embd.weight": w(VOCAB, HIDDEN),
        "output_norm.weight": ones(HIDDEN),
        "output.weight": w(VOCAB, HIDDEN),
    }
    for i in range(LAYERS):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = ones(HIDDEN)
        out[p + "attn_q.weight"] = w(HEADS * HEAD_DIM, HIDDEN)
        out[p + "attn_k.weight"] = w(KV_HEADS * HEAD_DIM, HIDDEN)
        out[p + "attn_v.weight"] = w(KV_HEADS * HEAD_DIM, HIDDEN)
        out[p + "attn_output.weight"] = w(HIDDEN, HEADS * HEAD_DIM)
        out[p + "ffn_norm.weight"] = ones(HIDDEN)
        out[p + "ffn_gate.weight"] = w(FFN, HIDDEN)
        out[p + "ffn_up.weight"] = w(FFN, HIDDEN)
        out[p + "ffn_down.weight"] = w(HIDDEN, FFN)
    return out


def write(path: Path, *, seed: int = 0, context: int = 16384) -> None:
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("workbench-tiny-llama")
    writer.add_context_length(context)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_vocab_size(VOCAB)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    pieces, scores, types = vocabulary()
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    for name, data in tensors(np.random.default_rng(seed)).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--context", type=int, default=16384, help="llama.context_length")
    args = ap.parse_args()
    write(args.out, seed=args.seed, context=args.context)
    print(args.out)


if __name__ == "__main__":
    main()
