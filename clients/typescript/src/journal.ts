// A durable settlement journal: the Settle a worker is about to send, on disk first, so that
// a worker that dies after the provider answered and before the Settle landed loses no
// usage. The next client with the same journal directory sends it again (recover()).
//
// A record is the Settle request itself, its protobuf bytes, named by the first 32 hex digits
// of the SHA-256 of its reservation id with `.settle` after them: the same format and names
// as the Python SDK's (src/earmark/client/journal.py), so that either SDK replays the
// other's records. A replay sends exactly what the first attempt sent, and the sidecar
// answers a repeated Settle of the same usage with the same answer, changing nothing, so a
// record replayed twice is charged once. A record is written atomically (a temporary file,
// fsynced, renamed, the directory fsynced) with mode 0600 before the request leaves, and
// removed only on a settled answer or a final refusal; a record that cannot be read is moved
// to quarantine/, named in a warning, never replayed.
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import * as pb from './gen/earmark/v1/budget.js';

export const JOURNAL_SUFFIX = '.settle';
export const QUARANTINE = 'quarantine';
/** recover() sends at most this many records a call (the Python SDK's bound). */
export const JOURNAL_REPLAY_RECORDS_MAX = 10_000;
/** A record larger than this is no Settle request (one is far smaller), so it is quarantined. */
export const JOURNAL_RECORD_BYTES_MAX = 1 << 16;

/** The refusals after which sending the Settle again cannot help (the hold is not there, or
 * was settled otherwise), so its record is removed; any other failure may pass. */
export const FINAL_CODES: ReadonlySet<Status> = new Set([
  Status.NOT_FOUND,
  Status.FAILED_PRECONDITION,
  Status.INVALID_ARGUMENT,
  Status.PERMISSION_DENIED,
  Status.ALREADY_EXISTS,
  Status.OUT_OF_RANGE,
]);

/** A record's file name: the id's digest, because the id comes from outside and must not
 * name a file itself. */
export function journalRecordName(reservationId: string): string {
  return `${createHash('sha256').update(reservationId, 'utf8').digest('hex').slice(0, 32)}${JOURNAL_SUFFIX}`;
}

/** A record found on disk: where it is, and the request it holds. */
export interface JournalRecord {
  path: string;
  request: pb.SettleRequest;
}

/** Settle requests not yet answered, one file each, in directory. */
export class Journal {
  readonly directory: string;
  private ready: Promise<void> | null = null;

  constructor(directory: string) {
    this.directory = path.resolve(directory);
  }

  /** Creates the directory (mode 0700) once, on first use, since a constructor cannot wait. */
  private made(): Promise<void> {
    this.ready ??= fs.mkdir(this.directory, { recursive: true, mode: 0o700 }).then(() => undefined);
    return this.ready;
  }

  /** Writes request durably; the record's path. */
  async write(request: pb.SettleRequest): Promise<string> {
    await this.made();
    const target = path.join(this.directory, journalRecordName(request.reservationId));
    // A name of this process's own, so that two processes writing one record never share
    // a temporary file; it does not end in .settle, so recover() never reads it half written.
    const temporary = `${target.slice(0, -JOURNAL_SUFFIX.length)}.${process.pid}.tmp`;
    const data = pb.SettleRequest.encode(request).finish();
    const file = await fs.open(temporary, 'w', 0o600);
    try {
      await file.writeFile(data);
      await file.sync();
    } finally {
      await file.close();
    }
    await fs.rename(temporary, target);
    await this.syncDirectory();
    return target;
  }

  /** Removes a record (one already gone is no error: another client may have sent it). */
  async remove(record: string): Promise<void> {
    await fs.rm(record, { force: true });
    await this.syncDirectory();
  }

  /** Every record, oldest first, at most JOURNAL_REPLAY_RECORDS_MAX; those that cannot be
   * read are quarantined. */
  async pending(): Promise<JournalRecord[]> {
    await this.made();
    const names = (await fs.readdir(this.directory)).filter((name) => name.endsWith(JOURNAL_SUFFIX));
    const dated: { path: string; mtime: bigint }[] = [];
    for (const name of names) {
      const record = path.join(this.directory, name);
      try {
        const stat = await fs.stat(record, { bigint: true });
        if (stat.isFile()) dated.push({ path: record, mtime: stat.mtimeNs });
      } catch {
        // Removed since it was listed (another client answered it): nothing to send.
      }
    }
    dated.sort((a, b) => (a.mtime < b.mtime ? -1 : a.mtime > b.mtime ? 1 : 0));
    const found: JournalRecord[] = [];
    for (const { path: record } of dated.slice(0, JOURNAL_REPLAY_RECORDS_MAX)) {
      try {
        found.push({ path: record, request: await readRecord(record) });
      } catch (error) {
        await this.quarantine(record, error);
      }
    }
    return found;
  }

  private async quarantine(record: string, error: unknown): Promise<void> {
    const folder = path.join(this.directory, QUARANTINE);
    await fs.mkdir(folder, { recursive: true, mode: 0o700 });
    const kind = error instanceof Error ? error.name : typeof error;
    process.emitWarning(`earmark journal: ${record} cannot be read (${kind}); moved to ${folder}`);
    await fs.rename(record, path.join(folder, path.basename(record)));
  }

  /** Makes a rename or a removal durable: it lives in the directory's own entries. */
  private async syncDirectory(): Promise<void> {
    const directory = await fs.open(this.directory, 'r');
    try {
      await directory.sync();
    } finally {
      await directory.close();
    }
  }
}

/** The request a record holds, or an error saying why it holds none. */
async function readRecord(record: string): Promise<pb.SettleRequest> {
  const data = await fs.readFile(record);
  if (data.length > JOURNAL_RECORD_BYTES_MAX) throw new RangeError('larger than a Settle request can be');
  const request = pb.SettleRequest.decode(data);
  if (!request.reservationId) throw new TypeError('names no reservation');
  return request;
}
