// One generated post as a card: its text, its character count against the limit, the rules it breaks
// (flags), a copy button (clipboard, with a confirmation) and a regenerate button for this card only.
// The app owns the text: `copy_regenerate` makes it write a new post and update this element's props.
// props.request (the values the post was written from, kept for a resumed thread's rewrite) is not shown.
import { useState } from "react"
import { Button } from "@/components/ui/button"
import { Badge } from "@/components/ui/badge"
import { Copy, Check, RefreshCw } from "lucide-react"
import { toast } from "sonner"

export default function CopyPost() {
  const [copied, setCopied] = useState(false)
  const [busy, setBusy] = useState(false)
  const flags = props.flags || []

  const copy = async () => {
    try {
      await navigator.clipboard.writeText(props.text)
      setCopied(true)
      toast.success("已复制到剪贴板 / Copied to the clipboard")
      setTimeout(() => setCopied(false), 3000)
    } catch (err) {
      toast.error("无法写入剪贴板，请手动选中文字复制 / The clipboard refused: select the text and copy it")
    }
  }

  const regenerate = async () => {
    if (busy) return
    setBusy(true)
    try {
      await callAction({ name: "copy_regenerate", payload: { card: props.card } })
    } finally {
      setBusy(false)
    }
  }

  return (
    <div className="copy-post flex flex-col gap-2 p-3 border rounded-lg max-w-xl" data-card={props.card}
      data-ok={flags.length === 0 ? "true" : "false"}>
      <div className="flex justify-between text-sm text-muted-foreground">
        <span>#{props.index}</span>
        <span className={"copy-count" + (props.chars > props.max_chars ? " text-red-600" : "")}>
          {props.chars}/{props.max_chars} 字
        </span>
      </div>
      <p className="copy-text whitespace-pre-wrap break-words">{props.text}</p>
      {flags.length ? (
        <div className="copy-flags flex flex-wrap gap-1">
          {flags.map((f) => <Badge key={f} variant="destructive">{f}</Badge>)}
        </div>
      ) : null}
      <div className="flex gap-2">
        <Button className="copy-button" size="sm" variant="outline" onClick={copy}>
          {copied ? <Check className="h-4 w-4" /> : <Copy className="h-4 w-4" />}
          {copied ? "已复制 Copied" : "复制 Copy"}
        </Button>
        <Button className="regenerate-button" size="sm" variant="ghost" onClick={regenerate} disabled={busy}>
          <RefreshCw className={"h-4 w-4" + (busy ? " animate-spin" : "")} />
          {busy ? "重写中… Regenerating" : "重写 Regenerate"}
        </Button>
      </div>
    </div>
  )
}
