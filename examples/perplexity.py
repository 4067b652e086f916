"""Score texts by perplexity (lower: the model finds them more likely) and show teacher-forced logits.

    python examples/perplexity.py [MODEL.gguf]
"""
import sys

import numpy as np

from oxigpu import LLM


def main() -> None:
    llm = LLM(sys.argv[1] if len(sys.argv) > 1 else None)
    for text in ("The cat sat on the mat.", "Mat the on sat cat the."):
        print(f"{llm.perplexity(text):10.2f}  {text}")
    ids = llm.tokenize("The capital of France is")
    logits = llm.logits(ids)                       # [len(ids), vocab]: row i predicts token i + 1
    print(f"after {llm.detokenize(ids)!r} the most likely token is {llm.detokenize([int(np.argmax(logits[-1]))])!r}")


if __name__ == "__main__":
    main()
