"""Print a completion piece by piece as it is generated, stopping at a blank line.

    python examples/stream.py [MODEL.gguf]
"""
import sys

from oxigpu import LLM


def main() -> None:
    llm = LLM(sys.argv[1] if len(sys.argv) > 1 else None)
    stream = llm.stream("Here is a short poem about the sea:\n", max_tokens=64, seed=0, stop=["\n\n"])
    for piece in stream:
        print(piece, end="", flush=True)
    print(f"\n[{stream.result.finish_reason}, {stream.result.timings.tokens_per_s:.1f} tokens/s]")


if __name__ == "__main__":
    main()
