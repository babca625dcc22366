"""Marketing copy (营销文案, issue 11): pure parts first, wired into the CLI and the chat app later.

Plan of the package (one job per module):
- rules.py: counting characters as a person counts them, the length and forbidden-word checks of one post
  (checks only: a post is never cut), and parsing the model's structured output {"posts": [...]}.
- batch_io.py: reading a products file (CSV in UTF-8/BOM/GBK, or XLSX, decided by content), row problems
  with spreadsheet row numbers, a stable key per product for resume, writing the posts as CSV/XLSX, and the
  keys already finished in a partial output.
- later (the lead): generation through the gateway with bounded concurrency and regeneration up to N times,
  the `ernie-ops copy batch` command, and the Chainlit form and cards.
"""
