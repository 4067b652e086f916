"""Complete a prompt greedily and print the text, why it stopped and how fast it ran.

    python examples/generate.py [MODEL.gguf]      # default: SmolLM2-135M-Instruct (./setup.sh run installs it)
"""
import sys

from oxigpu import LLM


def main() -> None:
    llm = LLM(sys.argv[1] if len(sys.argv) > 1 else None)
    result = llm.generate("The capital of France is", max_tokens=24, temperature=0)
    print(result.text)
    print(f"[{result.finish_reason}] {result.timings.summary()}")


if __name__ == "__main__":
    main()
