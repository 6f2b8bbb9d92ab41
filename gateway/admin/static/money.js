// Money for people: never scientific notation, never "$0" for an amount that is not zero.
// From $1 up: cents ($12.34). Below: three significant digits in plain decimals
// ($0.00000600 -> "$0.000006", $0.0123 -> "$0.0123").
"use strict";

function usd(value) {
  const n = Number(value);
  if (value === null || value === undefined || !Number.isFinite(n)) return "–";
  if (n === 0) return "$0.00";
  const sign = n < 0 ? "-" : "";
  const a = Math.abs(n);
  const options = a >= 1
    ? { minimumFractionDigits: 2, maximumFractionDigits: 2 }
    : { maximumSignificantDigits: 3 };
  return sign + "$" + a.toLocaleString("en-US", { useGrouping: false, ...options });
}

// Chart.js options for a money axis and its tooltips.
function moneyAxis() {
  return { ticks: { callback: (v) => usd(v) } };
}

function moneyTooltip() {
  return { callbacks: { label: (ctx) => `${ctx.dataset.label}: ${usd(ctx.parsed[ctx.chart.options.indexAxis === "y" ? "x" : "y"])}` } };
}
