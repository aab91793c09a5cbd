// A budget's page: its chart (uPlot) from the ledger's running totals, which the server put
// in the page (#series), and a point more each time the page polls the budget's numbers.
'use strict';

(() => {
  const summary = document.getElementById('summary');
  const box = document.getElementById('chart');
  const series = JSON.parse(document.getElementById('series').textContent);
  const limit = series.limit === null ? null : Number(series.limit);
  const data = [series.times.slice(), series.used.slice(), series.held.slice(), series.times.map(() => limit)];
  const stamp = (text) => Date.parse(text.replace(' UTC', 'Z').replace(' ', 'T')) / 1000;
  const start = stamp(box.dataset.cycleStart);
  const end = stamp(box.dataset.cycleEnd);
  const cycle = Number.isFinite(start) && Number.isFinite(end);
  const width = () => Math.max(280, box.clientWidth - 16);
  const chart = new uPlot({
    width: width(),
    height: 240,
    scales: { x: cycle ? { time: true, range: [start, end] } : { time: true } },
    axes: [{}, { size: 90 }],
    series: [
      {},
      { label: 'used', stroke: '#2f6fdb', width: 2 },
      { label: 'held', stroke: '#e3a008', width: 2 },
      { label: 'limit', stroke: '#b42318', dash: [6, 4], width: 1 },
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
    const newLimit = b.limit_raw === null ? null : Number(b.limit_raw);
    data[0].push(b.at);
    data[1].push(Number(b.used_raw));
    data[2].push(Number(b.held_raw));
    data[3].push(newLimit);
    chart.setData(data);
  });
})();
