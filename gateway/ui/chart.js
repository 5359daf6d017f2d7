// Bar charts drawn as SVG in the page (no library, no canvas).

const NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = String(text);
  return el;
}

/**
 * A bar chart of `points` ([{label, value}]), titled `title`, values shown
 * with `format`. Each bar has a <title> with its exact value.
 */
export function barChart(title, points, format = (v) => String(v)) {
  const width = 720;
  const height = 220;
  const left = 64;
  const bottom = 40;
  const top = 28;
  const root = svg('svg', {
    viewBox: `0 0 ${width} ${height}`,
    class: 'chart',
    role: 'img',
    'aria-label': title,
  });
  root.append(svg('text', { x: 8, y: 18, class: 'chart-title' }, title));
  const max = Math.max(0, ...points.map((p) => Number(p.value) || 0));
  const plotW = width - left - 12;
  const plotH = height - top - bottom;
  root.append(svg('line', { x1: left, y1: top + plotH, x2: width - 12, y2: top + plotH, class: 'axis' }));
  for (const frac of [0, 0.5, 1]) {
    const y = top + plotH - frac * plotH;
    root.append(svg('text', { x: left - 6, y: y + 4, class: 'tick', 'text-anchor': 'end' }, format(max * frac)));
    if (frac > 0) root.append(svg('line', { x1: left, y1: y, x2: width - 12, y2: y, class: 'grid' }));
  }
  if (!points.length) {
    root.append(svg('text', { x: left + plotW / 2, y: top + plotH / 2, class: 'tick', 'text-anchor': 'middle' }, 'no data'));
    return root;
  }
  const slot = plotW / points.length;
  const barW = Math.max(2, Math.min(48, slot * 0.7));
  // A label under every bar up to a month of days (turned when they would
  // touch), every few bars beyond.
  const every = Math.ceil(points.length / 31);
  const turned = slot * every < 40;
  points.forEach((p, i) => {
    const v = Number(p.value) || 0;
    const hgt = max > 0 ? (v / max) * plotH : 0;
    const x = left + i * slot + (slot - barW) / 2;
    const bar = svg('rect', { x, y: top + plotH - hgt, width: barW, height: Math.max(hgt, 0.5), class: 'bar-rect' });
    bar.append(svg('title', {}, `${p.label}: ${format(v)}`));
    root.append(bar);
    if (i % every === 0) {
      const lx = x + barW / 2;
      const ly = top + plotH + 14;
      const attrs = turned
        ? { x: lx, y: ly, class: 'tick', 'text-anchor': 'end', transform: `rotate(-45 ${lx} ${ly})` }
        : { x: lx, y: ly + 2, class: 'tick', 'text-anchor': 'middle' };
      root.append(svg('text', attrs, p.label));
    }
  });
  return root;
}

/**
 * A horizontal bar, `value` against `max`, for a table cell: the share of
 * a breakdown row, with a <title> of `label`.
 */
export function shareBar(value, max, label) {
  const width = 120;
  const root = svg('svg', { viewBox: `0 0 ${width} 10`, width, height: 10, class: 'share', role: 'img', 'aria-label': label });
  root.append(svg('rect', { x: 0, y: 0, width, height: 10, rx: 3, class: 'share-bg' }));
  const v = max > 0 ? Math.max(0, Math.min(1, Number(value) / max)) : 0;
  const bar = svg('rect', { x: 0, y: 0, width: Math.max(v * width, v > 0 ? 1 : 0), height: 10, rx: 3, class: 'bar-rect' });
  bar.append(svg('title', {}, label));
  root.append(bar);
  return root;
}

/** How many series a stacked chart draws on their own; the rest are summed as "Other". */
export const STACKED_SERIES = 6;

/**
 * A stacked bar chart: one bar a day (`labels`), split among `series`
 * ([{name, values}], values per label, largest first): the first
 * STACKED_SERIES on their own, the rest as "Other", with a legend.
 * Each segment has a <title> with its name and value.
 */
export function stackedChart(title, labels, series, format = (v) => String(v)) {
  const shown = series.slice(0, STACKED_SERIES);
  const rest = series.slice(STACKED_SERIES);
  if (rest.length) {
    shown.push({ name: `Other (${rest.length})`, values: labels.map((_, i) => rest.reduce((a, s) => a + (Number(s.values[i]) || 0), 0)) });
  }
  const width = 720;
  const height = 240;
  const left = 64;
  const bottom = 40;
  const top = 28;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'aria-label': title });
  root.append(svg('text', { x: 8, y: 18, class: 'chart-title' }, title));
  const totals = labels.map((_, i) => shown.reduce((a, s) => a + (Number(s.values[i]) || 0), 0));
  const max = Math.max(0, ...totals);
  const plotW = width - left - 12;
  const plotH = height - top - bottom;
  root.append(svg('line', { x1: left, y1: top + plotH, x2: width - 12, y2: top + plotH, class: 'axis' }));
  for (const frac of [0, 0.5, 1]) {
    const y = top + plotH - frac * plotH;
    root.append(svg('text', { x: left - 6, y: y + 4, class: 'tick', 'text-anchor': 'end' }, format(max * frac)));
    if (frac > 0) root.append(svg('line', { x1: left, y1: y, x2: width - 12, y2: y, class: 'grid' }));
  }
  if (!labels.length || max <= 0) {
    root.append(svg('text', { x: left + plotW / 2, y: top + plotH / 2, class: 'tick', 'text-anchor': 'middle' }, 'no data'));
  }
  const slot = labels.length ? plotW / labels.length : plotW;
  const barW = Math.max(2, Math.min(48, slot * 0.7));
  const every = Math.ceil(labels.length / 31);
  const turned = slot * every < 40;
  labels.forEach((label, i) => {
    const x = left + i * slot + (slot - barW) / 2;
    let y = top + plotH;
    shown.forEach((s, k) => {
      const v = Number(s.values[i]) || 0;
      if (v <= 0 || max <= 0) return;
      const hgt = (v / max) * plotH;
      y -= hgt;
      const seg = svg('rect', { x, y, width: barW, height: Math.max(hgt, 0.5), class: `seg s${k}` });
      seg.append(svg('title', {}, `${label} ${s.name}: ${format(v)}`));
      root.append(seg);
    });
    if (i % every === 0) {
      const lx = x + barW / 2;
      const ly = top + plotH + 14;
      const attrs = turned
        ? { x: lx, y: ly, class: 'tick', 'text-anchor': 'end', transform: `rotate(-45 ${lx} ${ly})` }
        : { x: lx, y: ly + 2, class: 'tick', 'text-anchor': 'middle' };
      root.append(svg('text', attrs, label));
    }
  });
  const legend = document.createElement('div');
  legend.className = 'legend';
  shown.forEach((s, k) => {
    const item = document.createElement('span');
    item.className = 'legend-item';
    const swatch = svg('svg', { width: 10, height: 10, class: 'swatch' });
    swatch.append(svg('rect', { x: 0, y: 0, width: 10, height: 10, rx: 2, class: `seg s${k}` }));
    item.append(swatch, document.createTextNode(s.name));
    legend.append(item);
  });
  const box = document.createElement('div');
  box.className = 'stacked';
  box.append(root, legend);
  return box;
}
