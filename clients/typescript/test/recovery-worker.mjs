// A worker process for the recovery-profile tests, a client made fresh from nothing but its
// arguments and the journal on disk (so that only durable state crosses a restart):
//
//   node recovery-worker.mjs settle TARGET JOURNAL RESERVATION_ID USED
//   node recovery-worker.mjs recover TARGET JOURNAL
//
// `settle` sends one journaled Settle (the test kills the process while it waits for the
// answer); `recover` sends what the journal holds once and prints how many were answered.
import { EarmarkClient } from '../dist/esm/index.js';

const [command, target, journalDir, ...rest] = process.argv.slice(2);
const earmark = new EarmarkClient({ target, journalDir });
try {
  if (command === 'settle') {
    const [reservationId, used] = rest;
    console.log('sending');
    const settled = await earmark.settle(reservationId, Number(used));
    console.log(JSON.stringify({ state: settled.state }));
  } else if (command === 'recover') {
    console.log(JSON.stringify({ recovered: await earmark.recover() }));
  } else {
    throw new Error(`unknown command ${command}`);
  }
} finally {
  earmark.close();
}
