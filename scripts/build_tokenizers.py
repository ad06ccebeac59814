"""Build the HuggingFace ``tokenizers`` files shipped in ``compact_hook/tokenizer_data``.

Why: the proxy must count tokens offline and without a ``tiktoken`` dependency at
runtime.  ``tiktoken`` downloads its BPE tables on first use; litellm already ships
those tables (and a Claude estimate) inside its wheel, so we convert them once into
self-contained ``tokenizers`` JSON files whose ids are identical to tiktoken's.

Conversion (checked by ``tests/unit/test_tokenizer_parity.py``):

* vocabulary: each tiktoken token (raw bytes) is spelled through the GPT-2
  byte<->unicode table, with id = tiktoken rank;
* merges: one per token — the two parts tiktoken's own BPE reaches when it encodes that
  token alone, stopping short of the token itself — ordered by the token's rank. A token
  that forms inside a longer word forms exactly as it does alone (a merge across its
  boundary would have prevented it), so this one merge is the one every encoding needs;
  the method is that of ``transformers``' tiktoken converter. Every split of every token
  (the previous build) gave the same ids with 2.2x the merges and ~2x the memory;
* model: ``BPE(..., ignore_merges=True)`` so a pre-token that is itself in the
  vocabulary maps straight to its id, as tiktoken does;
* pre-tokenizer: tiktoken's split regex (isolated) followed by a byte-level mapping
  without its own regex; decoder: byte-level.

No special tokens are registered: we only ever count plain text, so text such as
``<|endoftext|>`` must be split like ordinary characters (tiktoken's
``encode(text, disallowed_special=())``).

Run from the repository root::

    python scripts/build_tokenizers.py [OUT_DIR]
"""

from __future__ import annotations

import base64
import importlib.util
import shutil
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

OUT_DIR = Path(__file__).resolve().parent.parent / "compact_hook" / "tokenizer_data"

# tiktoken's cache file names: SHA-1 of the download URL of each ``.tiktoken`` file.
BPE_FILES: dict[str, str] = {
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
}

# Patterns from tiktoken_ext/openai_public.py, adapted to Oniguruma (the regex engine
# of ``tokenizers``).  Oniguruma (Ruby syntax) does not read ``{n,m}+`` as a
# possessive interval but as ``({n,m})+`` -- i.e. unbounded -- so cl100k's
# ``\p{N}{1,3}+`` is written ``\p{N}{1,3}`` (equivalent: a run of at most three
# digits never has anything to backtrack into).  ``?+``, ``++`` and ``*+`` are
# possessive in Oniguruma as in tiktoken and are kept.  o200k's pattern has no
# possessive quantifier and is used verbatim.
PATTERNS: dict[str, str] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}

CLAUDE_SOURCE = "anthropic_tokenizer.json"
CLAUDE_TARGET = "claude.json"


def litellm_tokenizers_dir() -> Path:
    """Directory where litellm keeps its bundled tokenizer files.

    Located without importing litellm (its import tries to fetch a cost map online).
    """
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        raise RuntimeError("litellm is not installed")
    return Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character table."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def load_ranks(path: Path) -> dict[bytes, int]:
    """Read a tiktoken BPE file (``base64-token rank`` per line)."""
    ranks: dict[bytes, int] = {}
    for line in path.read_text(encoding="ascii").splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not contiguous from 0")
    return ranks


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """One merge per token, in tiktoken merge order (the token's rank)."""
    keyed: list[tuple[int, bytes, bytes]] = []
    for token, rank in ranks.items():
        if len(token) > 1:
            parts = bpe_parts(ranks, token, max_rank=rank)
            if len(parts) == 2:
                keyed.append((rank, parts[0], parts[1]))
    keyed.sort()
    return [(left, right) for _, left, right in keyed]


def bpe_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """tiktoken's byte-pair merging of ``token``, using only merges ranked below ``max_rank``."""
    parts = [bytes([byte]) for byte in token]
    while len(parts) > 1:
        best: tuple[int, int] | None = None
        for index in range(len(parts) - 1):
            rank = ranks.get(parts[index] + parts[index + 1])
            if rank is not None and rank < max_rank and (best is None or rank < best[0]):
                best = (rank, index)
        if best is None:
            break
        index = best[1]
        parts[index : index + 2] = [parts[index] + parts[index + 1]]
    return parts


def build_tokenizer(ranks: dict[bytes, int], pattern: str) -> Tokenizer:
    """A ``tokenizers`` BPE tokenizer reproducing tiktoken ids for plain text."""
    byte_map = bytes_to_unicode()

    def spell(token: bytes) -> str:
        return "".join(byte_map[b] for b in token)

    vocab = {spell(token): rank for token, rank in ranks.items()}
    merges = [(spell(left), spell(right)) for left, right in derive_merges(ranks)]
    tokenizer = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def build_encoding(name: str, source_dir: Path, out_dir: Path) -> Path:
    """Convert one tiktoken encoding and write ``<name>.json``."""
    ranks = load_ranks(source_dir / BPE_FILES[name])
    target = out_dir / f"{name}.json"
    build_tokenizer(ranks, PATTERNS[name]).save(str(target), pretty=False)
    return target


def copy_claude(source_dir: Path, out_dir: Path) -> Path:
    """Ship litellm's Claude tokenizer estimate unchanged (it is already compact)."""
    target = out_dir / CLAUDE_TARGET
    shutil.copyfile(source_dir / CLAUDE_SOURCE, target)
    return target


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DIR
    source_dir = litellm_tokenizers_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [build_encoding(name, source_dir, out_dir) for name in BPE_FILES]
    written.append(copy_claude(source_dir, out_dir))
    for path in written:
        print(f"{path}  {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
