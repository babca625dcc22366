"""What the app's upload route takes (chat/upload_gate.py), how much memory its unit must hold (upload_limits.memory_mb,
host/cgroup.py, the start-up warning). The route itself, attacked through the real app: tests/integration/test_chat_app.py."""

from __future__ import annotations

from ernie_ops.chat import upload_gate, upload_limits
from ernie_ops.chat.config import ChatConfig
from ernie_ops.chat_app.server import memory_warning
from ernie_ops.config import Config
from ernie_ops.host import cgroup
from tests.harness.unit_files import SYSTEMD, directives

SCENARIOS = {s.name: s for s in ChatConfig().effective_scenarios()}
DOCS, COPY, ONBOARDING, GENERAL = (SCENARIOS[n] for n in ("文档问答 Docs", "营销文案 Marketing", "入职助手 Onboarding", "通用助手 General"))
MB = upload_gate.MB


def test_only_scenarios_that_read_files_take_them_unless_the_app_asked():
    assert [s.name for s in SCENARIOS.values() if s.takes_files] == [DOCS.name, COPY.name]
    for scenario in (ONBOARDING, GENERAL):
        why = upload_gate.refusal(scenario, asked=False, size=10, held=0, quota_mb=500)
        assert why is not None and why.status == 403 and f"{scenario.name} reads no files" in why.sentence
        assert upload_gate.refusal(scenario, asked=True, size=10, held=0, quota_mb=500) is None  # an AskFileMessage
    assert upload_gate.refusal(DOCS, asked=False, size=10, held=0, quota_mb=500) is None


def test_the_quota_counts_what_is_held_and_this_file_and_says_the_sizes():
    assert upload_gate.refusal(DOCS, asked=False, size=1 * MB, held=499 * MB, quota_mb=500) is None  # exactly full
    why = upload_gate.refusal(COPY, asked=False, size=1 * MB, held=499 * MB + 1, quota_mb=500)
    assert why.status == 413 and "499.0 MB held, this one 1.0 MB, the quota 500 MB (chat.upload_quota_mb)" in why.sentence, why
    assert "Delete old conversations" in why.sentence
    small = upload_gate.refusal(DOCS, asked=True, size=36_000, held=36_000, quota_mb=0.05)
    assert small.status == 413 and "35 KB held, this one 35 KB, the quota 0.05 MB" in small.sentence, small


def test_pending_files_count_for_their_user_until_settled_or_their_session_ends():
    pending = upload_gate.Pending()
    pending.add("s1", "ann", "f1", 100)
    pending.add("s1", "ann", "f2", 50)
    pending.add("s2", "ann", "f3", 7)
    pending.add("s3", "bob", "f4", 1000)
    assert (pending.bytes_of("ann"), pending.bytes_of("bob"), pending.bytes_of("eve")) == (157, 1000, 0)
    pending.settle("s1", ["f1", "unknown"])
    assert pending.bytes_of("ann") == 57
    pending.settle("s1", ["f2"])
    assert "s1" not in pending.sessions  # an emptied session leaves no entry behind
    pending.end("s2")
    pending.end("never-seen")
    assert pending.bytes_of("ann") == 0 and pending.bytes_of("bob") == 1000


def test_the_cgroup_memory_limit_is_read_from_the_process_own_cgroup(tmp_path):
    proc = tmp_path / "cgroup"
    unit = tmp_path / "fs" / "system.slice" / "ernie-chainlit.service"
    unit.mkdir(parents=True)
    proc.write_text("0::/system.slice/ernie-chainlit.service\n")
    (unit / "memory.max").write_text("3221225472\n")
    assert cgroup.memory_max_bytes(proc, tmp_path / "fs") == 3 * 1024 * MB
    (unit / "memory.max").write_text("max\n")
    assert cgroup.memory_max_bytes(proc, tmp_path / "fs") is None  # no limit
    proc.write_text("12:memory:/x\n")  # cgroup v1 only
    assert cgroup.memory_max_bytes(proc, tmp_path / "fs") is None
    assert cgroup.memory_max_bytes(tmp_path / "absent", tmp_path / "fs") is None


def test_the_unit_holds_the_default_reads_and_a_start_warns_when_the_settings_outgrow_it():
    assert directives(SYSTEMD / "ernie-chainlit.service")["MemoryMax"] == ["3G"]
    limit = 3 * 1024 * MB
    cfg = Config.model_validate({})
    assert upload_limits.memory_mb(cfg.chat) == 512 + 2 * 1024 and memory_warning(cfg, limit) is None
    assert memory_warning(cfg, None) is None  # by hand, no limit: nothing to compare
    more = Config.model_validate({"chat": {"file_reads_at_once": 3, "marketing": {"read_memory_mb": 1536}}})
    why = memory_warning(more, limit)
    assert why is not None and "MemoryMax= is 3072 MB" in why and "3 upload read(s) at once (chat.file_reads_at_once)" in why, why
    assert "need 5120 MB" in why and "systemctl edit ernie-chainlit" in why, why
