// The console's one script (no inline script: the pages' CSP allows only this origin's files).
// It draws the bars, polls the numbers of the page while it is visible, and runs the
// Concurrency Lab; budget.js draws a budget's chart.
'use strict';

const POLL_MS = Number(document.body.dataset.pollMs) || 2000;

function drawBars(root) {
  for (const bar of root.querySelectorAll('.bar')) {
    bar.querySelector('.used').style.width = `${bar.dataset.usedPct}%`;
    bar.querySelector('.held').style.width = `${bar.dataset.heldPct}%`;
  }
}

function applyBudget(root, b) {
  const fields = ['limit', 'used', 'held', 'remaining', 'open', 'period_start', 'resets_at', 'starts_local', 'resets_local', 'refusals', 'refusals_count', 'open_of', 'admissions'];
  for (const field of fields) {
    // A period's start is unknown ('') until a budget given a period first resets.
    if (b[field] === '') continue;
    for (const cell of root.querySelectorAll(`[data-field="${field}"]`)) cell.textContent = b[field];
  }
  for (const cell of root.querySelectorAll('[data-field="states"]')) {
    cell.replaceChildren(...b.states.map((s) => {
      const badge = document.createElement('span');
      badge.className = `badge ${s.replace(' ', '-')}`;
      badge.textContent = s;
      return badge;
    }));
    if (!b.states.length && root.id === 'summary') cell.textContent = 'active';
  }
  const bar = root.querySelector('.bar');
  if (bar) {
    bar.dataset.usedPct = b.used_pct;
    bar.dataset.heldPct = b.held_pct;
    bar.setAttribute('aria-label', `${b.remaining} remaining: ${b.used} used and ${b.held} held of ${b.limit}`);
  }
  drawBars(root);
}

// Polls url every POLL_MS while the page is visible; a failed poll waits for the next.
function poll(url, apply) {
  let timer = null;
  const tick = async () => {
    timer = null;
    if (document.visibilityState === 'visible') {
      try {
        const answer = await fetch(url, { headers: { accept: 'application/json' }, credentials: 'same-origin' });
        if (answer.ok) apply(await answer.json());
      } catch (error) {
        // The next tick tries again.
      }
    }
    timer = setTimeout(tick, POLL_MS);
  };
  timer = setTimeout(tick, POLL_MS);
  return () => timer && clearTimeout(timer);
}

function budgetsPage() {
  const list = document.getElementById('budgets');
  const params = new URLSearchParams({ q: list.dataset.q, page: list.dataset.pageToken });
  poll(`/api/budgets?${params}`, (page) => {
    for (const b of page.budgets) {
      const row = list.querySelector(`tr[data-budget-id="${CSS.escape(b.id)}"]`);
      if (row) applyBudget(row, b);
    }
  });
}

function labJob(job, index, mode) {
  const item = document.createElement('li');
  const label = document.createElement('span');
  const bar = document.createElement('progress');
  bar.max = 100;
  bar.value = job.pct;
  bar.setAttribute('aria-label', `${mode} job ${index + 1}`);
  const word = document.createElement('span');
  word.className = `job-status ${job.status}`;
  if (job.status === 'refused') {
    word.textContent = job.left === null ? ' refused' : ` refused: ${Number(job.left).toLocaleString('en-US')} left`;
  } else {
    word.textContent = ` ${job.status}, ${Number(job.charged).toLocaleString('en-US')}`;
  }
  label.textContent = `Job ${index + 1} `;
  item.append(label, bar, word);
  item.dataset.status = job.status;
  return item;
}

function showRun(run) {
  for (const mode of ['check', 'hold']) {
    const view = run.modes[mode];
    document.getElementById(`${mode}-jobs`).replaceChildren(...view.jobs.map((job, i) => labJob(job, i, mode)));
    document.getElementById(`${mode}-admitted`).textContent = view.admitted;
    document.getElementById(`${mode}-refused`).textContent = view.refused;
    const number = (key) => (view.result ? Number(view.result[key]).toLocaleString('en-US') : '…');
    document.getElementById(`${mode}-spent`).textContent = number('spent');
    document.getElementById(`${mode}-over`).textContent = number('over_plan');
  }
  const status = document.getElementById('lab-status');
  status.dataset.status = run.status;
  status.textContent = run.status === 'running' ? 'Running…' : run.status === 'done' ? 'Done.' : `Failed: ${run.error}`;
}

function followRun(runId) {
  const status = document.getElementById('lab-status');
  status.dataset.runId = runId;
  const tick = async () => {
    const answer = await fetch(`/api/lab/${encodeURIComponent(runId)}`, { credentials: 'same-origin' });
    if (!answer.ok) { status.textContent = 'That run is gone.'; return; }
    const run = await answer.json();
    showRun(run);
    if (run.status === 'running') setTimeout(tick, Number(document.body.dataset.labPollMs) || 150);
    else document.getElementById('run').disabled = false;
  };
  tick();
}

function labPage() {
  const form = document.getElementById('lab-form');
  const status = document.getElementById('lab-status');
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = new URLSearchParams(new FormData(form));
    body.set('respond', 'json');
    document.getElementById('run').disabled = true;
    status.textContent = 'Starting…';
    const answer = await fetch('/lab/run', { method: 'POST', body, credentials: 'same-origin', headers: { accept: 'application/json' } });
    const reply = await answer.json().catch(() => ({ error: `HTTP ${answer.status}` }));
    if (!answer.ok) {
      status.textContent = reply.error;
      document.getElementById('run').disabled = false;
      return;
    }
    followRun(reply.run_id);
  });
  if (status.dataset.runId) followRun(status.dataset.runId);
}

drawBars(document);
const page = document.body.dataset.page;
if (page === 'budgets') budgetsPage();
if (page === 'lab') labPage();
