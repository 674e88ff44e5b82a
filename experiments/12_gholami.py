"""Figure 12, Gholami's case study simulated: BERT-Base, BERT-Large and GPT-2 over sequence length.

Writes OUT/figures/gholami.png and .svg, the data as gholami.csv and the encoder/decoder
ratios and latency growth as gholami-summary.csv; experiments/README.md says how to read
it. It simulates its own cases (no sweep needed) and reuses its data while the model,
the profiles and the presets are unchanged. --quick: lengths 128-512 on the Xeon alone.
"""

import time

from _common import parse

from memwall.study.draw import figure_data, write_figures
from memwall.study.gholami import GHOLAMI_MACHINE

if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0])
    options = {"lengths": (128, 256, 512), "machines": (GHOLAMI_MACHINE,)} if args.quick else {}
    start = time.perf_counter()
    for path in write_figures(args.out, [], only=["gholami"], gholami=options)["gholami"]:
        print(path)
    for row in figure_data(args.out, "gholami")["data"]["summary"]:
        if row["what"] == "encoder/decoder":
            print(f"{row['machine']:16} L={row['length']:<5} {row['network']:11} intensity {row['intensity_ratio']:7.1f}x "
                  f"{row['decoder']}'s; {row['decoder']} latency {row['latency_ratio']:6.1f}x")
        else:
            print(f"{row['machine']:16} {row['network']:11} latency x{row['latency_growth']:.1f} over L={row['length']}")
    print(f"{time.perf_counter() - start:.1f} s")
