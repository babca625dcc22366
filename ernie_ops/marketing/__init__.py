"""Marketing copy (营销文案, the `chat.marketing` config section): posts for a product on a channel, one at a
time from the chat app's form or a whole products file from `ernie-ops copy batch`.

One job per module (none imports Chainlit; the chat app's form and cards are `chat_app/marketing_ui.py` and `chat/cards.py`):
- rules.py: counting characters as a person counts them, the length and forbidden-word checks of one post
  (checks only: a post is never cut), and parsing the model's structured output {"posts": [...]}.
- batch_io.py: reading a products file (CSV in UTF-8/BOM/GBK, or XLSX, decided by content), row problems
  with spreadsheet row numbers, a stable key per product for resume, writing the posts as CSV/XLSX, and the
  keys already finished in a partial output.
- channels.py: the channel presets (朋友圈, 微博, 小红书): length, hashtags, emoji, line breaks, style.
- generate.py: the form's request (every bad field at once), the prompt and JSON schema of one post, and
  `CopyWriter`: posts requested concurrently through the gateway, regenerated up to N times, flagged not cut.
- batch.py: `run_batch`, every row of a products file with bounded concurrency, resumable, a summary.
- commands.py: `ernie-ops copy batch INPUT -o OUTPUT` (registered by `cli/copy.py`).
- config.py: its config section, `chat.marketing` (MarketingConfig: the form's defaults, the rules, generation).
"""
