// A budget's page: its chart (uPlot) from the ledger's running totals, which the server put
// in the page (#series), and a point more each time the page polls the budget's numbers.
// Amounts are drawn in the unit the cards show: dollars for usd_micros (the server sends
// micro-dollars and the scale to divide them by), grouped whole numbers otherwise.
'use strict';

(() => {
  const summary = document.getElementById('summary');
  const box = document.getElementById('chart');
  const series = JSON.parse(document.getElementById('series').textContent);
  const scale = Number(series.scale) || 1;
  const dollars = series.unit === 'usd_micros';
  const drawn = (raw) => (raw === null ? null : Number(raw) / scale);
  // An amount as the cards write it: $1,234.50 (cents at least, micro-dollars at most).
  const amount = (value) => {
    if (value === null || value === undefined) return '';
    if (!dollars) return value.toLocaleString('en-US', { maximumFractionDigits: 2 });
    const text = Math.abs(value).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 });
    return `${value < 0 ? '-' : ''}$${text}`;
  };
  const limit = drawn(series.limit);
  const data = [series.times.slice(), series.used.map(drawn), series.held.map(drawn), series.times.map(() => limit)];
  const stamp = (text) => Date.parse(text.replace(' UTC', 'Z').replace(' ', 'T')) / 1000;
  const start = stamp(box.dataset.cycleStart);
  const end = stamp(box.dataset.cycleEnd);
  const cycle = Number.isFinite(start) && Number.isFinite(end);
  const width = () => Math.max(280, box.clientWidth - 16);
  const labelled = (u, splits) => {
    const labels = splits.map(amount);
    // The axis is drawn on a canvas, which nothing can read back: its labels are also
    // kept on the box, where the browser tests read what the axis says.
    box.dataset.yLabels = labels.join(' ');
    return labels;
  };
  const value = (u, v) => amount(v);
  const chart = new uPlot({
    width: width(),
    height: 240,
    scales: { x: cycle ? { time: true, range: [start, end] } : { time: true } },
    axes: [{}, { size: 90, values: labelled }],
    series: [
      {},
      { label: 'used', stroke: '#2f6fdb', width: 2, value },
      { label: 'held', stroke: '#e3a008', width: 2, value },
      { label: 'limit', stroke: '#b42318', dash: [6, 4], width: 1, value },
    ],
  }, data, box);
  window.addEventListener('resize', () => chart.setSize({ width: width(), height: 240 }));
  // At most this many live points are added: the page is reloaded for a longer look.
  const livePointsMax = 1000;
  let live = 0;
  poll(`/api/budget?id=${encodeURIComponent(summary.dataset.budgetId)}`, (b) => {
    applyBudget(summary, b);
    if (live >= livePointsMax) return;
    live += 1;
    data[0].push(b.at);
    data[1].push(drawn(b.used_raw));
    data[2].push(drawn(b.held_raw));
    data[3].push(drawn(b.limit_raw));
    chart.setData(data);
  });
})();
