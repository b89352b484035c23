// The status sequences on a fake Gitea, without CONDUCTOR_PUBLIC_URL: no
// status carries a target_url.
import { sequenceTests } from './sequences.ts';
import { statusStack } from './support.ts';

// GitHub's API is pointed at the fake too, so a stray GitHub post would show up there.
const { fake, stack } = await statusStack(import.meta.filename);

sequenceTests('gitea', stack, fake);
