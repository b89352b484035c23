// lib/masking.ts, the one masking rule of the control plane and the runner,
// and the runner's log stream holding back text that could be the start of a
// secret however many writes it comes in.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MASK, Masker, MIN_SECRET_LENGTH } from '../../lib/masking.ts';
import { LogStream } from '../../runner/logstream.ts';
import { waitFor } from './support.ts';

const SECRET = 'correct-horse/battery staple';

/** The base64 of `before` + the secret + `after`, as a script would print an encoded credential. */
function base64Around(before: string, after = '!tail'): string {
  return Buffer.from(`${before}${SECRET}${after}`, 'utf8').toString('base64');
}

test('every encoded form of a secret is masked', () => {
  const masker = new Masker([SECRET]);
  const forms: Record<string, string> = {
    'as it is': `token=${SECRET};`,
    'URL-encoded': `https://x.example/?t=${encodeURIComponent(SECRET)}&u=1`,
    'URL-encoded, lower-case hex': `t=${encodeURIComponent(SECRET).toLowerCase()}`,
    'form-encoded': `t=${encodeURIComponent(SECRET).replace(/%20/g, '+')}`,
    'JSON-escaped': JSON.stringify({ t: SECRET }).replace(/\//g, '\\/'),
    'JSON \\u escapes': `{"t":"${SECRET.replace(/-/g, '\\u002d').replace(/ /g, '\\u0020')}"}`,
    'JSON \\u escapes, upper-case hex': `"${SECRET.replace(/-/g, '\\u002D')}"`,
  };
  for (const [what, text] of Object.entries(forms)) {
    const masked = masker.mask(text);
    assert.ok(masked.includes(MASK), `${what}: ${masked}`);
    assert.ok(!masked.includes('horse'), `${what} leaves part of the secret: ${masked}`);
  }
  // Base64 at each of the three alignments a value can have inside a longer text.
  for (const before of ['', 'a', 'ab', 'abc', 'user:']) {
    const text = base64Around(before);
    const masked = masker.mask(text);
    assert.ok(masked.includes(MASK), `base64 after ${before.length} bytes: ${masked}`);
    // What is left decodes to no more than the bytes around the secret.
    assert.ok(masked.length < text.length - 20, `base64 after ${before.length} bytes: ${masked}`);
  }
  const url = Buffer.from(`x${SECRET}`).toString('base64url');
  assert.ok(masker.mask(url).includes(MASK), `base64url: ${masker.mask(url)}`);
  assert.equal(masker.mask('nothing to see'), 'nothing to see');
});

test(`values shorter than ${MIN_SECRET_LENGTH} characters are not masked`, () => {
  const masker = new Masker(['on', 'dev', 'four']);
  assert.equal(masker.mask('on dev four'), `on dev ${MASK}`);
  assert.equal(new Masker(['on']).empty, true);
});

/** A log stream that flushes partial lines after 20 ms into `sent`, masking SECRET. */
function recordingStream(): { stream: LogStream; sent: string[] } {
  const sent: string[] = [];
  const stream = new LogStream(
    async (offset, data) => {
      sent.push(data);
      return offset + Buffer.byteLength(data);
    },
    { flushMs: 20, chunkBytes: 1024, masker: new Masker([SECRET]) },
  );
  return { stream, sent };
}

test('a secret written in three pieces is masked by the log stream before it is sent', async () => {
  const { stream, sent } = recordingStream();
  // A partial line waits a flush interval and is then sent, except for the
  // end that could be the start of the secret: each piece waits for the next.
  const pieces = ['the key: corr', 'ect-horse/bat', 'tery staple and more'];
  for (const [i, piece] of pieces.entries()) {
    stream.write(piece);
    if (i === 0)
      await waitFor('the first partial line', () => (sent.length > 0 ? true : undefined));
    else await new Promise((r) => setTimeout(r, 60));
  }
  stream.write('\n');
  await stream.close(5_000);
  assert.equal(sent.join(''), `the key: ${MASK} and more\n`);
  for (const chunk of sent) assert.ok(!/corr|horse|staple/.test(chunk), JSON.stringify(sent));
});

test('a URL-encoded secret split between writes is masked too', async () => {
  const { stream, sent } = recordingStream();
  const encoded = encodeURIComponent(SECRET);
  stream.write(`GET /?t=${encoded.slice(0, 16)}`);
  await waitFor('the partial line', () => (sent.length > 0 ? true : undefined));
  stream.write(`${encoded.slice(16)} 200\n`);
  await stream.close(5_000);
  assert.equal(sent.join(''), `GET /?t=${MASK} 200\n`);
});
