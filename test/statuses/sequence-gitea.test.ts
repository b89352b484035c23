// The status sequences on a fake Gitea, without CONDUCTOR_PUBLIC_URL: no
// status carries a target_url.
import { startFakeStatusForge } from '../helpers/fake-status-forge.ts';
import { testStack } from '../helpers/stack.ts';
import { sequenceTests } from './sequences.ts';

const fake = await startFakeStatusForge();
// GitHub's API is pointed at the fake too, so a stray GitHub post would show up there.
const stack = await testStack(import.meta.filename, { CONDUCTOR_GITHUB_API_URL: fake.url });

sequenceTests('gitea', stack, fake);
