// One racing worker process: JOBS jobs at once on BUDGET, each a hold() of 10,000 charged
// 3,000 a step for 4 steps (12,000: the last step is capped at the hold). Prints what it was
// admitted, refused and charged, as one JSON line. It loads the CommonJS build, as a
// worker that `require`s the package does, so the race runs both builds.
import { createRequire } from 'node:module';

const { EarmarkClient, hold } = createRequire(import.meta.url)('../dist/cjs/index.js');

const [budgetId, jobs] = [process.argv[2], Number(process.argv[3])];
const earmark = new EarmarkClient();
const summary = { admitted: 0, refused: 0, capped: 0, charged: 0 };
await Promise.all(
  Array.from({ length: jobs }, async () => {
    const answer = await hold(
      earmark,
      budgetId,
      10_000,
      async (h) => {
        for (let step = 0; step < 4; step += 1) {
          const charged = await h.charge(3_000);
          if (charged.capped) {
            summary.capped += 1;
            break;
          }
        }
        return h;
      },
      { returnRefusal: true },
    );
    if (answer.admitted === false) summary.refused += 1;
    else {
      summary.admitted += 1;
      summary.charged += answer.settled.charged;
    }
  }),
);
earmark.close();
console.log(JSON.stringify(summary));
