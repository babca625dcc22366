# ernie-ops: `make test` installs everything the tests need on a fresh Debian 12 machine and runs
# all tiers; `make demo` brings up a sandboxed host. Downloads are cached in ~/.cache, never /tmp.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/ernie-ops
VENV ?= $(CACHE)/venv
PY := $(VENV)/bin/python
APT_PACKAGES := nginx systemd python3-venv curl iproute2 util-linux procps chromium fonts-wqy-microhei
REQS := requirements/test.txt
STAMP := $(VENV)/.ernie-ops-$(shell cat $(REQS) setup.py | sha256sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: test deps apt venv lint unit

test: deps
	@echo "== ernie-ops test suite (all tiers) =="; start=$$(date +%s); \
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	echo "== suite time: $$(( $$(date +%s) - start )) s, pytest exit $$rc =="; exit $$rc

unit: deps
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: deps
	$(VENV)/bin/ruff check ernie_ops tests && $(VENV)/bin/ruff format --check ernie_ops tests

# The editable install is redone every run: it must point at THIS checkout (CI clones elsewhere).
deps: apt venv
	@$(PY) -m pip install -q --no-deps -e . > $(CACHE)/pip-editable.log 2>&1 || { cat $(CACHE)/pip-editable.log; exit 1; }

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(STAMP)

# The venv is built from Debian's /usr/bin/python3, never a pyenv shim: a unit with ProtectHome=yes
# cannot follow a venv whose interpreter lives under /root.
$(STAMP): $(REQS) setup.py
	@test -x $(PY) || /usr/bin/python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r $(REQS)
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@rm -f $(VENV)/.ernie-ops-*; touch $@
