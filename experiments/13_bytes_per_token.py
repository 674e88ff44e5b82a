"""Figure 13, bytes per token: weights, optimizer state, communication and activations against batch

Writes OUT/figures/bytes_per_token.png, .svg and .csv; experiments/README.md says how to read it.
It needs no simulation: the bytes are the step's operands as its kernels name them.
"""

from _common import parse

from memwall.study.draw import write_figures

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_figures(args.out, [], only=["bytes_per_token"])["bytes_per_token"]:
        print(path)
