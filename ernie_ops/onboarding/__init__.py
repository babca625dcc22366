"""The new-employee onboarding helper (新员工入职助手).

The plan of the package, one job per module:
- `config`: its config section, `chat.onboarding` (the HR source from `hr.config`, push log, window, templates).
- `plan`: the first-week tasks and system guides from templates per department and role (validated
  config), each item with a stable item_id, and the welcome as one item the model writes from the facts
  (name, department, role, start date, manager). The model only personalises the welcome's wording: it
  never adds, drops or edits tasks, systems or links (see plan.py's docstring for what the chat layer must do).
- `pushlog`: the SQLite push log under the state directory: (employee, item_id) pushed once, confirmed
  once (已确认), all-or-nothing writes, each employee sees only their own items.
- `window`: whether today is inside the employee's onboarding (pre-boarding through start + active_days),
  and the polite sentence for after it (OnboardingOver).
- `welcome_check`: the model's welcome against the HR record (a department, role, manager or date that
  is not the record's, an invented number): pure logic, `mismatch(text, facts)`.
- `service`: what the chat app calls: the HR connector from config (ernie_ops.hr: SCIM 2.0 or the HR
  export file; HR failures are HRError with one friendly sentence), `Onboarding.open`/`confirm` for a
  login, and `card`, the props of the chat's OnboardingItem element (chat_app/onboarding_ui.py).
- `export_check`: `ernie-ops hr check FILE`, an HR export read with `hr.export_file`'s parsing and every record
  checked, those past the onboarding window listed (Ansible's `validate:` before a new export replaces the
  installed one).

The flow `Onboarding.open` follows: facts = HR lookup (outside the window: OnboardingOver);
plan = build_plan(facts, templates); pending = to_push(plan, ids already in the log); if the welcome is
pending, ask the model for its text (and keep it only if service.refusal finds nothing: no foreign
link, no mismatch with the record; else fallback_welcome); push(employee, the pending items as NewItem);
show push()'s return value (the stored items, with their 已确认 state).
"""
