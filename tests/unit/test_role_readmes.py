"""Each role's README.md documents its variables from meta/argument_specs.yml (ansible/role_readme.py), so the two
cannot drift; and the spec's defaults are those defaults/main.yml sets, so the generated table is true."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
ROLES = sorted(p for p in (ANSIBLE / "roles").iterdir() if p.is_dir())
FIX = "run `python ansible/role_readme.py` and commit the README"

# ansible/ is no package (and `ansible` is Ansible's own name): the generator is loaded from its file
_spec = importlib.util.spec_from_file_location("role_readme", ANSIBLE / "role_readme.py")
role_readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_readme)


def test_every_role_has_a_readme_whose_variables_are_generated_from_its_argument_spec():
    assert len(ROLES) == 11
    for role in ROLES:
        readme = role / "README.md"
        assert readme.is_file(), f"{role.name}: no README.md (copy another role's, with its two VARIABLES markers)"
        block = role_readme.current_block(readme.read_text(encoding="utf-8"))
        assert block is not None, f"{role.name}/README.md: no lines {role_readme.BEGIN} ... {role_readme.END}"
        assert block == role_readme.generated_block(role), f"{role.name}/README.md: its Variables table is stale: {FIX}"


def test_the_spec_defaults_are_those_of_defaults_main():
    """A spec default is what the table shows; defaults/main.yml is what runs. A literal default missing from the spec
    would show as — (only a templated one, derived from other variables, is left to the description)."""
    for role in ROLES:
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
        for name, value in defaults.items():
            opt = options[name]
            if "default" in opt:
                assert opt["default"] == value, f"{role.name}: {name} defaults to {value!r}, its spec says {opt['default']!r}"
            elif not opt.get("required"):
                assert "{{" in yaml.safe_dump(value), f"{role.name}: {name}: {value!r} from defaults/main.yml belongs in the spec's default"


SPEC = """
argument_specs:
  main: &main
    options:
      demo_hosts:
        type: list
        elements: str
        default: &loopback [127.0.0.1, "::1"]
        description: [Who may connect,  "a | in text."]
      demo_readers:
        type: list
        elements: str
        default: *loopback
        description: The same list, through an alias.
      demo_token: &secret
        type: str
        default: ""
        no_log: true
        description: A token <from a vault>.
      demo_key:
        <<: *secret
        description: A key, like requirements/*.lock; `a <b> *c*` stays code.
      demo_source:
        type: dict
        required: true
        description: Where it comes from.
        options:
          kind: {type: str, required: true, choices: [hub, path], description: Kind.}
      demo_items:
        type: list
        elements: dict
        default: []
        options:
          name: {required: true}
      demo_limits:
        type: dict
        default: {max_mb: 100, version: "12.1", enabled: true}
        description: Limits.
      demo_derived:
        type: int
        description: (from demo_other) its port.
  preflight: *main
"""

TABLE = """\
| Variable | Type | Default | Description |
|---|---|---|---|
| `demo_hosts` | list of str | `[127.0.0.1, '::1']` | Who may connect a \\| in text. |
| `demo_readers` | list of str | `[127.0.0.1, '::1']` | The same list, through an alias. |
| `demo_token` | str (no_log) | `''` | A token &lt;from a vault>. |
| `demo_key` | str (no_log) | `''` | A key, like requirements/\\*.lock; `a <b> *c*` stays code. |
| `demo_source` | dict | **required** | Where it comes from. |
| `demo_source.kind` | str: `hub`, `path` | **required** | Kind. |
| `demo_items` | list of dict | `[]` |  |
| `demo_items[].name` | str | **required** |  |
| `demo_limits` | dict | `{max_mb: 100, version: '12.1', enabled: true}` | Limits. |
| `demo_derived` | int | — | (from demo_other) its port. |
"""


def test_variables_table_renders_required_options_compact_defaults_and_anchors():
    spec = yaml.safe_load(SPEC)
    assert role_readme.variables_table(spec) == TABLE
    # the anchored entry point renders the same options (the table is of `main`)
    assert spec["argument_specs"]["preflight"] is spec["argument_specs"]["main"]


def test_check_names_a_stale_readme_and_the_run_rewrites_only_its_block(tmp_path, monkeypatch, capsys):
    role = tmp_path / "ernie_demo"
    shutil.copytree(ANSIBLE / "roles" / "ernie_cuda" / "meta", role / "meta")
    text = f"# ernie_demo\n\nBefore.\n\n{role_readme.BEGIN}\n| old |\n{role_readme.END}\n\nAfter.\n"
    (role / "README.md").write_text(text)
    monkeypatch.setattr(role_readme, "ROLES", tmp_path)
    assert role_readme.main(["--check"]) == 1
    assert f"{role / 'README.md'}: stale" in capsys.readouterr().err
    assert (role / "README.md").read_text() == text  # --check changes nothing
    assert role_readme.main([]) == 0
    new = (role / "README.md").read_text()
    assert new.startswith("# ernie_demo\n\nBefore.\n\n") and new.endswith(f"{role_readme.END}\n\nAfter.\n")
    assert "| `ernie_cuda_version` | str | `'12.1'` |" in new and "| old |" not in new
    assert role_readme.main(["--check"]) == 0
    (role / "README.md").write_text("# ernie_demo\n")  # markers lost: an error in both modes, naming the file
    assert role_readme.main([]) == 1 and role_readme.main(["--check"]) == 1
    assert "without the lines" in capsys.readouterr().err
