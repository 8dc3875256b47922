"""Arguments of `lacuna serve` the benchmarks share."""

import subprocess


def no_vasa_args(binary):
    """`--no-vasa` for a build with a VASA provider (older builds lack the flag):
    a benchmark that does not use the provider leaves its port to others."""
    out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
    return ["--no-vasa"] if "--no-vasa" in out else []
