"""Sampling settings side by side: greedy, a seeded draw (reproducible), and a hotter, wider one.

    python examples/sampling.py [MODEL.gguf]
"""
import sys

from oxigpu import LLM, SamplingParams


def main() -> None:
    llm = LLM(sys.argv[1] if len(sys.argv) > 1 else None)
    prompt = "Once upon a time"
    settings = {
        "greedy": SamplingParams(temperature=0, max_tokens=32),
        "seed 42": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=42, max_tokens=32),
        "seed 42 again": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=42,
                                        max_tokens=32),
        "hot": SamplingParams(temperature=1.3, top_k=0, top_p=1.0, min_p=0.02, repeat_penalty=1.1, seed=7,
                              max_tokens=32),
    }
    for name, params in settings.items():
        print(f"--- {name}: {llm.generate(prompt, params).text!r}")


if __name__ == "__main__":
    main()
