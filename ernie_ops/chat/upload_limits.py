"""How large a chat upload may be, at each layer it crosses, from the one setting `chat.docs.max_file_mb`.

A file travels browser -> edge -> gateway -> Chainlit (`POST /project/file`) -> the app. The app's own limit
is the one a user should meet, because only the app answers with a sentence naming it; so every layer in
front lets a little more through: Chainlit takes up to `chainlit_mb`, nginx (gateway and edge) takes
Chainlit's limit plus the multipart envelope. The API (`/v1/`) keeps its own, smaller, body limit.
"""

from __future__ import annotations

from ernie_ops.chat.config import ChatConfig

CHAINLIT_CEILING_MB = 1024  # the largest upload Chainlit is asked to take, whatever the app's limit
CHAINLIT_FLOOR_MB = 100  # a file far over a small app limit still reaches the app and gets its sentence
ENVELOPE_MB = 1  # multipart boundary lines and part headers: a few hundred bytes; 1 MB is ample


def chainlit_mb(chat: ChatConfig) -> int:
    """Chainlit's `spontaneous_file_upload.max_size_mb`: four times the app's limit, at least 100 MB."""
    return min(CHAINLIT_CEILING_MB, max(CHAINLIT_FLOOR_MB, int(chat.docs.max_file_mb * 4)))


def nginx_mb(chat: ChatConfig) -> int:
    """`client_max_body_size` (MB) of the chat's upload location at the gateway and the edge."""
    return chainlit_mb(chat) + ENVELOPE_MB


def ask_mb(chat: ChatConfig) -> int:
    """The size an AskFileMessage's drop zone accepts (Chainlit checks it in the browser): the app's limit."""
    return min(CHAINLIT_FLOOR_MB, max(1, int(chat.docs.max_file_mb)))


APP_MB = 512  # the app itself: Chainlit, the index's connection, the replies in flight (its peak: test_chat_app.py prints it)


def memory_mb(chat: ChatConfig) -> int:
    """What the chat unit's `MemoryMax=` must hold: the app, plus `chat.file_reads_at_once` reading children each at
    its own cap (a document's extraction, a product list: whichever cap is larger)."""
    child = max(chat.docs.extract_memory_mb, chat.marketing.read_memory_mb)
    return APP_MB + chat.file_reads_at_once * child
