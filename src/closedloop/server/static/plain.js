// The run's control in plain words, beside the chart.
// The same rules as closedloop.agent._plain (the run report's view; its tests pin them):
// f_est -> risk score, the PID integral -> failures recovered, protocols -> safety actions.
"use strict";

(function (root) {
  const THRESHOLDS = [0.4, 0.6, 0.8];
  const LABELS = ["low", "elevated", "high", "critical"];
  const FAILED = 0.5;
  const ACTIONS = {
    dual_verification: "double-checked the proposal (asked again, ran the call most samples made)",
    dimension_reduction: "narrowed the scope to the essential tools",
    manual_handover: "stopped and handed the task to a person",
  };

  function riskLabel(f) {
    return LABELS[THRESHOLDS.filter((t) => f >= t).length];
  }

  function plainView(points) {
    const steps = points.filter((p) => p);
    if (!steps.length) return { risk: 0, label: "low", lines: [] };
    const peak = Math.max(...steps.map((s) => s.f_est));
    const last = steps[steps.length - 1].f_est;
    const risk = Math.round(100 * peak);
    const label = riskLabel(peak);
    let avoided = 0, failures = 0;
    const open = {};
    for (const s of steps) {
      const integral = (s.pid || [0, 0, 0])[1];
      if (s.e >= FAILED) { failures += 1; open[s.step_type] = true; }
      else if (open[s.step_type]) { delete open[s.step_type]; if (integral > 0) avoided += 1; }
    }
    const integralPeak = Math.max(...steps.map((s) => (s.pid || [0, 0, 0])[1]));
    const counts = {};
    for (const s of steps) counts[s.protocol] = (counts[s.protocol] || 0) + 1;
    const actions = Object.keys(ACTIONS).filter((p) => counts[p])
      .map((p) => ACTIONS[p] + ": " + counts[p] + " step(s)");
    const meanU = steps.reduce((a, s) => a + s.u, 0) / steps.length;
    return {
      risk, label,
      lines: [
        ["Risk score (" + label + ")", "peak " + risk + "/100, at the end " + Math.round(100 * last) + "/100", "f_est"],
        ["Repeated failures", avoided + " of " + failures + " failed steps recovered on a later try (integral peak " + integralPeak.toFixed(2) + ")", "PID integral term"],
        ["Automatic safety actions", actions.length ? actions.join("; ") : "all " + steps.length + " steps ran normally", "ADRC protocol levels"],
        ["Extra care", "average " + Math.round(100 * meanU) + " % of the maximum over " + steps.length + " steps", "control signal u"],
      ],
    };
  }

  function renderPlain(target, points) {
    if (!target) return;
    target.replaceChildren();
    const view = plainView(points);
    for (const [name, text, term] of view.lines) {
      const dt = document.createElement("dt");
      dt.textContent = name;
      dt.title = term;
      const dd = document.createElement("dd");
      dd.textContent = text;
      target.append(dt, dd);
    }
  }

  const api = { plainView, renderPlain, riskLabel };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.ClosedloopPlain = api;
})(typeof window !== "undefined" ? window : globalThis);
