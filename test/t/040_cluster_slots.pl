# The hash slot rlock computes for a key (src/shared/slots.c, through
# test/unit/keyslot.c) is the one Redis computes: CLUSTER KEYSLOT on a
# cluster-enabled server, for the names of the Redis Cluster reference
# and thousands of random keys full of braces, NUL and high bytes.
use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Cluster;
use RlockTest::Redis;

plan skip_all => 'slots do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $program = RlockTest::unit_program('keyslot');
my $dir = PostgreSQL::Test::Utils::tempdir();
my $redis = RlockTest::Redis->start(
	port => RlockTest::Cluster->free_port_pair,
	args => [ '--cluster-enabled', 'yes',
		'--cluster-config-file', "$dir/nodes.conf" ]);

my @keys = ('mylock', '{mylock}', 'redisson_lock__channel:{mylock}', 'a}b',
	'redisson_lock__channel:{a}b}', 'a{b', '{}x{y}', 'a}b{c}', 'foo{}{bar}',
	'foo{{bar}}zap', '', '{', '}', '{}', '{{}}', 'x' x 3000,
	"{\x00}", "\xff{\xfe}\xfd");
srand(40);
my @alphabet = ('a', 'b', '{', '}', '{', '}', "\x00", "\xff", '%', ':');
for (1 .. 5000)
{
	push @keys,
	  join('', map { $alphabet[ int(rand(@alphabet)) ] } 1 .. int(rand(14)));
}

my $input = join('', map {
		(my $k = $_) =~ s/([^\x21-\x24\x26-\x7e])/sprintf('%%%02X', ord($1))/ge;
		"$k\n"
} @keys);
my $output = '';
IPC::Run::run([ $program ], '<', \$input, '>', \$output)
  or die 'keyslot failed';
my @mine = split /\n/, $output;
is(scalar(@mine), scalar(@keys), 'a slot for every key');

my @wrong;
for my $i (0 .. $#keys)
{
	my $theirs = $redis->cmd('CLUSTER', 'KEYSLOT', $keys[$i]);
	push @wrong, "key #$i: rlock $mine[$i], Redis $theirs"
	  unless defined $mine[$i] && $mine[$i] eq $theirs;
}
is(scalar(@wrong), 0, scalar(@keys) . ' keys: the slots agree with CLUSTER KEYSLOT')
  or diag(join("\n", @wrong[ 0 .. ($#wrong < 9 ? $#wrong : 9) ]));
is($mine[0], 1711, 'mylock is in slot 1711');
is($mine[3], 7866, 'a}b is in slot 7866, its channel in 15495')
  and is($mine[4], 15495, 'its channel in 15495');

$redis->stop;
done_testing();
