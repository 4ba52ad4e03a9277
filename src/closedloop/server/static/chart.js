// A small canvas line chart of one run's control signals, written for this dashboard.
// x: step index; y: e(t), u(t), f_est(t) in [0, 1]; a band below shows the protocol level.
"use strict";

(function () {
  const LEVELS = { normal: 0, dual_verification: 1, dimension_reduction: 2, manual_handover: 3 };
  const SERIES = [
    { key: "e", color: "--e" },
    { key: "u", color: "--u" },
    { key: "f_est", color: "--f" },
  ];

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
  }

  function clamp01(v) {
    return typeof v === "number" && isFinite(v) ? Math.min(1, Math.max(0, v)) : null;
  }

  class ControlChart {
    constructor(canvas) {
      this.canvas = canvas;
      this.points = [];
      this.canvas.dataset.points = "0";
      const redraw = () => this.draw();
      if (typeof ResizeObserver === "function") {
        new ResizeObserver(redraw).observe(canvas);
      }
      window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redraw);
    }

    setPoints(points) {
      this.points = points.filter(Boolean);
      this.canvas.dataset.points = String(this.points.length);
      this.canvas.dataset.lastProtocol = this.points.length
        ? this.points[this.points.length - 1].protocol : "";
      this.draw();
    }

    draw() {
      const canvas = this.canvas;
      const ratio = window.devicePixelRatio || 1;
      const width = canvas.clientWidth || 600;
      const height = canvas.clientHeight || 280;
      if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
        canvas.width = Math.round(width * ratio);
        canvas.height = Math.round(height * ratio);
      }
      const ctx = canvas.getContext("2d");
      ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
      ctx.clearRect(0, 0, width, height);

      const pad = { left: 36, right: 12, top: 10, bottom: 44 };
      const band = 14;
      const plotW = Math.max(10, width - pad.left - pad.right);
      const plotH = Math.max(10, height - pad.top - pad.bottom);
      const n = this.points.length;
      const span = Math.max(10, n - 1);
      const x = (i) => pad.left + (plotW * i) / span;
      const y = (v) => pad.top + plotH * (1 - v);
      const text = cssVar("--muted");

      ctx.font = "11px system-ui, sans-serif";
      ctx.lineWidth = 1;
      ctx.strokeStyle = cssVar("--grid");
      ctx.fillStyle = text;
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      for (let k = 0; k <= 4; k++) {
        const v = k / 4;
        ctx.beginPath();
        ctx.moveTo(pad.left, y(v) + 0.5);
        ctx.lineTo(pad.left + plotW, y(v) + 0.5);
        ctx.stroke();
        ctx.fillText(v.toFixed(2), pad.left - 5, y(v));
      }
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      const every = Math.max(1, Math.ceil(span / 10));
      for (let i = 0; i <= span; i += every) {
        ctx.fillText(String(i), x(i), pad.top + plotH + band + 8);
      }
      ctx.textAlign = "right";
      ctx.fillText("step", pad.left - 5, pad.top + plotH + band + 8);

      if (n === 0) {
        ctx.textAlign = "center";
        ctx.textBaseline = "middle";
        ctx.fillText("waiting for steps…", pad.left + plotW / 2, pad.top + plotH / 2);
        return;
      }

      // Protocol band: one cell per step, coloured by level.
      const bandTop = pad.top + plotH + 4;
      const cell = n > 1 ? plotW / span : 12;
      this.points.forEach((p, i) => {
        const level = LEVELS[p.protocol] ?? 0;
        ctx.fillStyle = cssVar("--l" + level);
        const left = n > 1 ? x(i) - cell / 2 : x(i) - 6;
        ctx.fillRect(Math.max(pad.left, left), bandTop, Math.min(cell, pad.left + plotW - left), band - 4);
      });

      for (const s of SERIES) {
        const color = cssVar(s.color);
        ctx.strokeStyle = color;
        ctx.fillStyle = color;
        ctx.lineWidth = 2;
        ctx.beginPath();
        let started = false;
        this.points.forEach((p, i) => {
          const v = clamp01(p[s.key]);
          if (v === null) { started = false; return; }
          if (started) ctx.lineTo(x(i), y(v)); else ctx.moveTo(x(i), y(v));
          started = true;
        });
        ctx.stroke();
        this.points.forEach((p, i) => {
          const v = clamp01(p[s.key]);
          if (v === null) return;
          ctx.beginPath();
          ctx.arc(x(i), y(v), 2.5, 0, Math.PI * 2);
          ctx.fill();
        });
      }
    }
  }

  window.ControlChart = ControlChart;
})();
