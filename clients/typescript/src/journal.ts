// A durable settlement journal: the Settle a worker is about to send, on disk first, so that
// a worker that dies after the provider answered and before the Settle landed loses no
// usage. The next client with the same journal directory sends it again (recover()).
//
// A record holds the Settle request itself, its protobuf bytes, base64 in a small JSON object
// that also names its reservation and the record's version; its file is named
// `v2-<SHA-256 of the reservation id's exact UTF-8 bytes, lower-case hex>.json`, the standard
// name of the Cycles SDK Recovery Conformance Profile (docs/recovery-conformance.md), so
// that distinct ids never share a file. The format, names and bytes are the Python SDK's
// (src/earmark/client/journal.py), so that either SDK replays the other's records. A
// replay sends exactly what the first attempt sent, and the sidecar answers a repeated Settle
// of the same usage with the same answer, changing nothing, so a record replayed twice is
// charged once. A record is written atomically (a temporary file, fsynced, renamed, the
// directory fsynced) with mode 0600 before the request leaves, and removed only on a settled
// answer or a final refusal; a record that cannot be read, or of a version this SDK does not
// know, is moved to quarantine/, named in a warning, never replayed.
//
// The directory must be private: at start (new Journal()) one that, after any symlink to it is
// followed, is not owned by the process's user or is writable by its group or by others is
// refused with UnsafeJournalError naming it, because any record found there is replayed, and
// another user's record would settle a hold that is not theirs. Each record is opened without
// following a symlink and without blocking (a FIFO named as a record must not hold the client
// forever), checked on its descriptor to be a regular file owned by the user and read to
// limits.JOURNAL_RECORD_BYTES_MAX and no further; anything else is quarantined unread.
// Journal.quarantined counts the files this journal set aside, and each warning says it.
//
// Records of the first format (the bare protobuf bytes, named by the first 32 hex digits of
// the digest with `.settle` after them) are still read: pending() moves each to the standard
// name of the reservation it holds, so an upgrade loses none.
import { createHash } from 'node:crypto';
import { constants, mkdirSync, promises as fs, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import * as pb from './gen/earmark/v1/budget.js';
import * as limits from './limits.js';

/** The record format this SDK writes and reads, in the record and in its file's name. */
export const JOURNAL_RECORD_VERSION = 2;
const PREFIX = `v${JOURNAL_RECORD_VERSION}-`;
export const JOURNAL_SUFFIX = '.json';
/** The first format's records: read, moved to the standard name, never written. */
export const JOURNAL_LEGACY_SUFFIX = '.settle';
export const QUARANTINE = 'quarantine';
/** recover() sends at most this many records a call (the Python SDK's bound). */
export const JOURNAL_REPLAY_RECORDS_MAX = 10_000;
/** A record larger than this holds no Settle request (one is far smaller), so it is
 * quarantined (the Python SDK's bound). */
export const JOURNAL_RECORD_BYTES_MAX = limits.JOURNAL_RECORD_BYTES_MAX;
const STANDARD_NAME = /^v2-[0-9a-f]{64}\.json$/;

/** The refusals after which sending the Settle again cannot help (the hold is not there, or
 * was settled otherwise, or the request can never be taken), so its record is removed; any
 * other failure may pass. PERMISSION_DENIED is not one: a record replayed under another
 * worker token is still the spend of the caller that made the hold, and the recovery profile
 * keeps records across authentication failures. */
export const FINAL_CODES: ReadonlySet<Status> = new Set([
  Status.NOT_FOUND,
  Status.FAILED_PRECONDITION,
  Status.INVALID_ARGUMENT,
  Status.ALREADY_EXISTS,
  Status.OUT_OF_RANGE,
]);

function digest(reservationId: string): string {
  return createHash('sha256').update(reservationId, 'utf8').digest('hex');
}

/** A record's file name: the digest of the id's exact UTF-8 bytes, because the id comes from
 * outside and must not name a file itself. */
export function journalRecordName(reservationId: string): string {
  return `${PREFIX}${digest(reservationId)}${JOURNAL_SUFFIX}`;
}

/** The name the first format gave the id's record. */
export function legacyJournalRecordName(reservationId: string): string {
  return `${digest(reservationId).slice(0, 32)}${JOURNAL_LEGACY_SUFFIX}`;
}

/** A record's bytes: compact JSON, UTF-8, the same bytes the Python SDK writes. */
export function encodeJournalRecord(request: pb.SettleRequest): Buffer {
  const settle = Buffer.from(pb.SettleRequest.encode(request).finish()).toString('base64');
  return Buffer.from(JSON.stringify({ version: JOURNAL_RECORD_VERSION, reservation_id: request.reservationId, settle }));
}

/** The request a record holds, or an error saying why it holds none. */
export function decodeJournalRecord(data: Buffer): pb.SettleRequest {
  if (data.length > JOURNAL_RECORD_BYTES_MAX) throw new RangeError('larger than a Settle record can be');
  const record: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(data));
  if (typeof record !== 'object' || record === null || Array.isArray(record)) throw new TypeError('not a JSON object');
  const { version, reservation_id: reservationId, settle } = record as Record<string, unknown>;
  if (version !== JOURNAL_RECORD_VERSION) throw new TypeError(`unsupported record version ${JSON.stringify(version)}`);
  if (typeof reservationId !== 'string' || reservationId === '') throw new TypeError('names no reservation');
  if (typeof settle !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(settle) || settle.length % 4 !== 0) {
    throw new TypeError('holds no settle request');
  }
  const request = pb.SettleRequest.decode(Buffer.from(settle, 'base64'));
  if (request.reservationId !== reservationId) throw new TypeError('its settle request is for another reservation');
  return request;
}

function decodeLegacy(data: Buffer): pb.SettleRequest {
  if (data.length > JOURNAL_RECORD_BYTES_MAX) throw new RangeError('larger than a Settle request can be');
  const request = pb.SettleRequest.decode(data);
  if (!request.reservationId) throw new TypeError('names no reservation');
  return request;
}

function missing(error: unknown): boolean {
  return (error as NodeJS.ErrnoException)?.code === 'ENOENT';
}

/** A journal directory another user could write, refused at start. */
export class UnsafeJournalError extends Error {
  override name = 'UnsafeJournalError';
}

const PRIVATE = 'a journal directory must be private (mode 0700, owned by its worker\'s user)';

/** Throws UnsafeJournalError unless directory (its symlinks followed) is a directory of this
 * process's user that neither its group nor others can write. */
function checkDirectory(directory: string): void {
  const stat = statSync(directory);
  if (!stat.isDirectory()) throw new UnsafeJournalError(`earmark journal: ${directory} is not a directory`);
  const uid = process.geteuid?.();
  if (uid !== undefined && stat.uid !== uid) {
    throw new UnsafeJournalError(
      `earmark journal: ${directory} is owned by uid ${stat.uid}, not this process's ${uid}; ${PRIVATE}`,
    );
  }
  if ((stat.mode & 0o022) !== 0) {
    const mode = (stat.mode & 0o7777).toString(8).padStart(4, '0');
    throw new UnsafeJournalError(`earmark journal: ${directory} has mode ${mode}, writable by others; ${PRIVATE}`);
  }
}

/** The bytes of the record at record, if it is a regular file of this process's user no larger
 * than a record can be; else an error saying why it is none. */
async function readRecord(record: string): Promise<Buffer> {
  let file: fs.FileHandle;
  try {
    // O_NOFOLLOW: a symlink is never followed to a file it names; O_NONBLOCK: opening a FIFO
    // returns at once instead of waiting for a writer.
    file = await fs.open(record, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    if ((error as NodeJS.ErrnoException)?.code === 'ELOOP') throw new TypeError('a symlink, not a record');
    throw error;
  }
  try {
    // Checked on the descriptor, not the name: the file read is the file checked.
    const stat = await file.stat();
    if (!stat.isFile()) throw new TypeError('not a regular file');
    const uid = process.geteuid?.();
    if (uid !== undefined && stat.uid !== uid) throw new TypeError(`owned by uid ${stat.uid}, not this process's ${uid}`);
    if (stat.size > JOURNAL_RECORD_BYTES_MAX) throw new RangeError('larger than a Settle record can be');
    // One byte past the bound tells a file that grew since the stat from one that did not.
    const buffer = Buffer.alloc(JOURNAL_RECORD_BYTES_MAX + 1);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await file.read(buffer, filled, buffer.length - filled, null);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return buffer.subarray(0, filled);
  } finally {
    await file.close();
  }
}

/** A record found on disk: where it is, and the request it holds. */
export interface JournalRecord {
  path: string;
  request: pb.SettleRequest;
}

/** Settle requests not yet answered, one file each, in directory. */
export class Journal {
  readonly directory: string;
  /** Files this journal quarantined (unreadable, foreign, not regular, too large). */
  quarantined = 0;

  /** Creates directory (mode 0700) if it is not there, and refuses one another user could
   * write (UnsafeJournalError): at start, synchronously, so that a client never runs on it. */
  constructor(directory: string) {
    const wanted = path.resolve(directory);
    mkdirSync(wanted, { recursive: true, mode: 0o700 });
    checkDirectory(wanted);
    // The directory checked, not a symlink that could be pointed elsewhere later.
    this.directory = realpathSync(wanted);
  }

  /** Writes request durably; the record's path. mtime dates the record (a migrated one
   * keeps its first date, so that replay stays oldest first). */
  async write(request: pb.SettleRequest, mtime?: Date): Promise<string> {
    const target = path.join(this.directory, journalRecordName(request.reservationId));
    // A name of this process's own, so that two processes writing one record never share
    // a temporary file; it does not end in .json, so recover() never reads it half written.
    const temporary = `${target.slice(0, -JOURNAL_SUFFIX.length)}.${process.pid}.tmp`;
    const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW;
    const file = await fs.open(temporary, flags, 0o600);
    try {
      await file.writeFile(encodeJournalRecord(request));
      await file.sync();
    } finally {
      await file.close();
    }
    if (mtime !== undefined) await fs.utimes(temporary, mtime, mtime);
    await fs.rename(temporary, target);
    await this.syncDirectory();
    return target;
  }

  /** Removes the record of reservationId at record (one already gone is no error: another
   * client may have sent it), and a first-format record of the same id if one is left;
   * never a first-format file that holds another id (a name two ids shared). */
  async remove(record: string, reservationId: string): Promise<void> {
    await fs.rm(record, { force: true });
    const legacy = path.join(this.directory, legacyJournalRecordName(reservationId));
    let holds: string | null = null;
    try {
      holds = decodeLegacy(await readRecord(legacy)).reservationId;
    } catch {
      // None there, or not one this id's record: left alone.
    }
    if (holds === reservationId) await fs.rm(legacy, { force: true });
    await this.syncDirectory();
  }

  /** Every record, oldest first, at most JOURNAL_REPLAY_RECORDS_MAX, after moving
   * first-format records to their standard names; those that cannot be read are
   * quarantined. */
  async pending(): Promise<JournalRecord[]> {
    await this.migrate();
    const names = (await fs.readdir(this.directory)).filter((name) => name.endsWith(JOURNAL_SUFFIX));
    const dated: { path: string; mtime: bigint }[] = [];
    for (const name of names) {
      const record = path.join(this.directory, name);
      try {
        // lstat: a symlink, a FIFO or a folder is dated itself, and quarantined below unread.
        const stat = await fs.lstat(record, { bigint: true });
        dated.push({ path: record, mtime: stat.mtimeNs });
      } catch {
        // Removed since it was listed (another client answered it): nothing to send.
      }
    }
    dated.sort((a, b) => (a.mtime < b.mtime ? -1 : a.mtime > b.mtime ? 1 : a.path < b.path ? -1 : 1));
    const found: JournalRecord[] = [];
    for (const { path: record } of dated.slice(0, JOURNAL_REPLAY_RECORDS_MAX)) {
      let request: pb.SettleRequest;
      try {
        if (!STANDARD_NAME.test(path.basename(record))) throw new TypeError('not a record name this SDK writes');
        request = decodeJournalRecord(await readRecord(record));
        if (path.basename(record) !== journalRecordName(request.reservationId)) {
          throw new TypeError('named for another reservation');
        }
      } catch (error) {
        if (missing(error)) continue;
        await this.quarantine(record, error);
        continue;
      }
      found.push({ path: record, request });
    }
    return found;
  }

  /** Moves each first-format record to the standard name of the reservation it holds
   * (keeping a standard record already there: it is as new or newer), then removes it; one
   * that cannot be read is quarantined. */
  private async migrate(): Promise<void> {
    const names = (await fs.readdir(this.directory)).filter((name) => name.endsWith(JOURNAL_LEGACY_SUFFIX)).sort();
    for (const name of names) {
      const legacy = path.join(this.directory, name);
      let request: pb.SettleRequest;
      let mtime: Date;
      try {
        mtime = (await fs.lstat(legacy)).mtime;
        request = decodeLegacy(await readRecord(legacy));
      } catch (error) {
        if (missing(error)) continue;
        await this.quarantine(legacy, error);
        continue;
      }
      const standard = path.join(this.directory, journalRecordName(request.reservationId));
      const there = await fs.stat(standard).then(
        () => true,
        () => false,
      );
      if (!there) await this.write(request, mtime);
      // The file's own record is now under its standard name: removing it removes nothing
      // of another reservation.
      await fs.rm(legacy, { force: true });
      await this.syncDirectory();
    }
  }

  private async quarantine(record: string, error: unknown): Promise<void> {
    const folder = path.join(this.directory, QUARANTINE);
    await fs.mkdir(folder, { recursive: true, mode: 0o700 });
    let target = path.join(folder, path.basename(record));
    // An earlier file of the same name stays: both are evidence.
    if (await fs.stat(target).then(() => true, () => false)) target = `${target}.${process.hrtime.bigint()}`;
    const why = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    try {
      await fs.rename(record, target);
    } catch (failure) {
      if (!missing(failure)) throw failure; // another client moved it first
      return;
    }
    this.quarantined += 1;
    process.emitWarning(
      `earmark journal: ${record} cannot be read (${why}); moved to ${folder} (${this.quarantined} quarantined by this client)`,
    );
    await this.syncDirectory();
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
