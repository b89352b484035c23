// The status sequences on a fake GitHub, with CONDUCTOR_PUBLIC_URL set: every
// status links to <public url>/jobs/<id>.
import { sequenceTests } from './sequences.ts';
import { statusStack } from './support.ts';

const PUBLIC_URL = 'https://ci.example.com/conductor/';
const { fake, stack } = await statusStack(import.meta.filename, {
  CONDUCTOR_PUBLIC_URL: PUBLIC_URL,
});

sequenceTests('github', stack, fake, { publicUrl: PUBLIC_URL });
