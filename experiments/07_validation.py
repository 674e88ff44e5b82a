"""Figure 7, validation: memwall's predictions against published measurements.

Writes OUT/figures/validation.png and .svg and OUT/validation.json (the cases and their
notes); experiments/README.md says how to read it. It needs no sweep.
"""

from _common import parse

from memwall.execute.validation import write_validation

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    for path in write_validation(args.out):
        print(path)
