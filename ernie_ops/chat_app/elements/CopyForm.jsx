// The marketing-copy form (营销文案). Rendered by Chainlit as a custom element: `props`, `callAction`
// are injected globals. Submitting calls the app's `copy_generate` action with the raw values; the app
// validates them (every bad field at once, shown under its input via props.errors) and sends the cards.
// The channel (朋友圈/微博/小红书, props.channels) is a select; an empty max length takes the channel's limit,
// shown as the field's placeholder.
import { useState } from "react"
import { Button } from "@/components/ui/button"
import { Input } from "@/components/ui/input"
import { Textarea } from "@/components/ui/textarea"
import { Label } from "@/components/ui/label"

const FIELDS = [
  ["product", "产品 Product", "input", "例如：降噪耳机 X1"],
  ["selling_points", "卖点 Selling points", "textarea", "例如：40 小时续航，通勤降噪"],
  ["audience", "目标人群 Audience", "input", "例如：通勤白领"],
  ["tone", "语气 Tone", "input", "例如：轻松、真诚（可不填）"],
  ["channel", "发布渠道 Channel", "select", ""],
  ["posts", "条数 Posts", "number", ""],
  ["max_chars", "每条字数上限 Max characters", "number", ""],
]

// What is typed outlives a remount: Chainlit remounts the chat when its first interaction moves the page to the
// thread's address, and a field typed just then came back empty (CI: the product lost, the form refused again).
// A draft is kept per form (props.form_id) for the values the app last sent; new values from the app replace it.
const drafts = (window.__ernieCopyDrafts = window.__ernieCopyDrafts || {})

export default function CopyForm() {
  const initial = {}
  for (const [name] of FIELDS) initial[name] = props.values && props.values[name] != null ? String(props.values[name]) : ""
  const sent = JSON.stringify([props.values, props.errors, props.failure])
  const draft = props.form_id ? drafts[props.form_id] : undefined
  const [values, setValues] = useState(draft && draft.sent === sent ? draft.values : initial)
  const change = (name, value) => {
    const next = { ...values, [name]: value }
    if (props.form_id) drafts[props.form_id] = { sent, values: next }
    setValues(next)
  }
  const [busy, setBusy] = useState(false)
  const errors = props.errors || {}
  const channels = props.channels || []
  const chosen = channels.find((c) => c.name === values.channel)
  const hintOf = (name, hint) =>
    name === "max_chars" && chosen ? `按渠道 ${chosen.max_chars}（可不填） / channel's ${chosen.max_chars}` : hint

  const submit = async (event) => {
    event.preventDefault()
    if (busy) return
    setBusy(true)
    try {
      await callAction({ name: "copy_generate", payload: { values } })
    } finally {
      setBusy(false)
    }
  }

  return (
    <form id="copy-form" onSubmit={submit} className="flex flex-col gap-3 p-4 border rounded-lg max-w-xl">
      {FIELDS.map(([name, label, kind, hint]) => (
        <div key={name} className="flex flex-col gap-1">
          <Label htmlFor={`copy-${name}`}>{label}</Label>
          {kind === "textarea" ? (
            <Textarea id={`copy-${name}`} value={values[name]} placeholder={hint} rows={2}
              onChange={(e) => change(name, e.target.value)} />
          ) : kind === "select" ? (
            <select id={`copy-${name}`} value={values[name]}
              className="h-9 rounded-md border border-input bg-transparent px-3 text-sm"
              onChange={(e) => change(name, e.target.value)}>
              {channels.map((c) => <option key={c.name} value={c.name}>{c.label}</option>)}
            </select>
          ) : (
            <Input id={`copy-${name}`} value={values[name]} placeholder={hintOf(name, hint)}
              type={kind === "number" ? "number" : "text"} min={kind === "number" ? 1 : undefined}
              onChange={(e) => change(name, e.target.value)} />
          )}
          {errors[name] ? <p id={`copy-error-${name}`} className="text-sm text-red-600">{errors[name]}</p> : null}
        </div>
      ))}
      {props.failure ? <p id="copy-failure" className="text-sm text-red-600">{props.failure}</p> : null}
      <Button id="copy-generate" type="submit" disabled={busy}>
        {busy ? "生成中… Generating" : "生成文案 Generate"}
      </Button>
    </form>
  )
}
