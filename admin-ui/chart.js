// Charts drawn as SVG: a line of one series, or areas stacked from several. No library; the
// colours come from style.css (`.series-N`), so the page's CSP needs no inline style.

const SVG = 'http://www.w3.org/2000/svg';
const H = 160;
const PAD = { left: 40, right: 8, top: 8, bottom: 20 };

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 5, 10]) if (value <= m * step) return m * step;
  return 10 * step;
}

const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

/**
 * Draws `series` (arrays of numbers, one per sample, oldest first) into `node`, stacked when
 * there are several. `label` is what a screen reader hears, with the latest and peak values.
 */
export function draw(node, series, { label, interval = 5 }) {
  // Drawn at the width it is shown at, so that its text stays at the page's size on a phone and
  // on a wide screen alike (it is drawn again at every refresh).
  const W = Math.max(240, Math.round((node.clientWidth || 600) - 2));
  const samples = series[0]?.length ?? 0;
  const totals = Array.from({ length: samples }, (_, i) => series.reduce((sum, s) => sum + (s[i] || 0), 0));
  const top = niceMax(Math.max(0, ...totals));
  const x = (i) => PAD.left + (samples <= 1 ? 0 : (i / (samples - 1)) * (W - PAD.left - PAD.right));
  const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const latest = samples ? totals[samples - 1] : 0;
  const peak = samples ? Math.max(...totals) : 0;
  const root = svg('svg', {
    viewBox: `0 0 ${W} ${H}`,
    role: 'img',
    'aria-label': `${label}: latest ${fmt(latest)} per second, peak ${fmt(peak)}, over ${samples} samples`,
    class: 'chart-svg',
    width: W,
    height: H,
  });
  for (const v of [0, top / 2, top]) {
    root.append(svg('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: 'grid' }));
    const text = svg('text', { x: PAD.left - 4, y: y(v) + 4, class: 'axis', 'text-anchor': 'end' });
    text.textContent = fmt(v);
    root.append(text);
  }
  const span = svg('text', { x: W - PAD.right, y: H - 4, class: 'axis', 'text-anchor': 'end' });
  span.textContent = samples > 1 ? `last ${Math.round(((samples - 1) * interval) / 60)} min` : 'waiting for samples';
  root.append(span);
  if (samples > 1) {
    const below = new Array(samples).fill(0);
    series.forEach((values, n) => {
      const upper = values.map((v, i) => below[i] + (v || 0));
      if (series.length === 1) {
        const points = upper.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
        root.append(svg('polyline', { points, class: `line series-${n}` }));
      } else {
        const top = upper.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
        const bottom = below.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).reverse();
        root.append(svg('polygon', { points: [...top, ...bottom].join(' '), class: `area series-${n}` }));
      }
      upper.forEach((v, i) => { below[i] = v; });
    });
  }
  node.replaceChildren(root);
}
