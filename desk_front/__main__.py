from desk_front.app import main

main()
