// A batch run's live progress (营销文案批量): the app updates these props while rows finish.
import { Progress } from "@/components/ui/progress"

export default function BatchProgress() {
  const total = props.total || 0
  const done = props.done || 0
  const pct = total ? Math.round((100 * done) / total) : 0
  return (
    <div id="batch-progress" className="flex flex-col gap-2 p-3 border rounded-lg max-w-xl"
      data-done={done} data-total={total} data-finished={props.finished ? "true" : "false"}>
      <div className="flex justify-between text-sm">
        <span>{props.finished ? "完成 Finished" : "生成中 Generating"}: {props.file}</span>
        <span className="batch-count">{done}/{total}</span>
      </div>
      <Progress value={pct} className="h-2" />
      <div className="text-sm text-muted-foreground">
        {props.failed ? `失败 failed: ${props.failed} · ` : ""}
        {props.current ? `当前 now: ${props.current}` : ""}
      </div>
    </div>
  )
}
