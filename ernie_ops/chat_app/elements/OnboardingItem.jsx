// One pushed onboarding item (welcome, a first-week task, a system guide) with its 确认 button.
// Confirming calls the app's `onboarding_confirm` action: the app records it in the push log for the
// logged-in employee (never for anyone the browser names) and updates these props to 已确认.
import { useState } from "react"
import { Button } from "@/components/ui/button"
import { Badge } from "@/components/ui/badge"
import { CheckCircle } from "lucide-react"

// A link only to http(s) or this site's own paths: a card's props come back from the history database on a resumed
// thread, and a url rewritten there to javascript:, data: or //elsewhere must not become a clickable link (issue 34).
// tests/unit/test_onboarding_link.py runs this line in node against the attacker's urls.
const safeUrl = (u) => (typeof u === "string" && /^(https?:\/\/[^\s\\]+|\/(?![\/\\])[^\s\\]*)$/i.test(u.trim()) ? u.trim() : null)

export default function OnboardingItem() {
  const [busy, setBusy] = useState(false)

  const confirm = async () => {
    if (busy || props.confirmed) return
    setBusy(true)
    try {
      await callAction({ name: "onboarding_confirm", payload: { item_id: props.item_id } })
    } finally {
      setBusy(false)
    }
  }

  return (
    <div className="onboarding-item flex flex-col gap-2 p-3 border rounded-lg max-w-xl" data-item={props.item_id}
      data-kind={props.kind} data-confirmed={props.confirmed ? "true" : "false"}>
      <div className="flex justify-between items-center">
        <span className="font-medium">{props.title}</span>
        {props.confirmed ? (
          <Badge className="onboarding-confirmed" variant="secondary"><CheckCircle className="h-3 w-3 mr-1" />已确认</Badge>
        ) : null}
      </div>
      <p className="onboarding-body whitespace-pre-wrap break-words text-sm">{props.body}</p>
      {safeUrl(props.url) ? (
        <a className="onboarding-link text-sm underline" href={safeUrl(props.url)} target="_blank" rel="noreferrer">{props.url}</a>
      ) : props.url ? (
        <span className="onboarding-link-refused text-sm">{String(props.url)}</span>
      ) : null}
      {props.error ? <p className="text-sm text-red-600">{props.error}</p> : null}
      {props.confirmed ? null : (
        <div>
          <Button className="onboarding-confirm" size="sm" onClick={confirm} disabled={busy}>
            {busy ? "确认中…" : "确认 Confirm"}
          </Button>
        </div>
      )}
    </div>
  )
}
