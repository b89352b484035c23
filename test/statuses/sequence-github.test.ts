// The status sequences on a fake GitHub, with CONDUCTOR_PUBLIC_URL set: every
// status links to <public url>/jobs/<id>.
import { startFakeStatusForge } from '../helpers/fake-status-forge.ts';
import { testStack } from '../helpers/stack.ts';
import { sequenceTests } from './sequences.ts';

const PUBLIC_URL = 'https://ci.example.com/conductor/';
const fake = await startFakeStatusForge();
const stack = await testStack(import.meta.filename, {
  CONDUCTOR_GITHUB_API_URL: fake.url,
  CONDUCTOR_PUBLIC_URL: PUBLIC_URL,
});

sequenceTests('github', stack, fake, { publicUrl: PUBLIC_URL });
